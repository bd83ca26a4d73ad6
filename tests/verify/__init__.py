"""Verification: inputs and shapes, onnxruntime sessions and the worker, regions, rollback, cost."""
