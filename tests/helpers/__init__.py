"""Helpers the test modules share (no tests here)."""
