"""TensorRT knowledge (what each ONNX parser release accepts) and the optional engine build."""
