"""TensorRT knowledge (the support data) and the engine step."""
