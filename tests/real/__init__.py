"""Exports of real model code (fixtures/real): verification, readiness, fixed point."""
