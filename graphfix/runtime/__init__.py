"""onnxruntime in a supervised worker process, and the sessions opened through it."""
