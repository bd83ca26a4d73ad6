"""Readiness per TensorRT release (findings) and the catalogue of parser errors."""
