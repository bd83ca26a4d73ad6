"""Verification against onnxruntime: inputs and shapes, sessions, comparison, regions."""
