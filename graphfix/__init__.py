"""graphfix: make PyTorch ONNX exports pass TensorRT's ONNX parser, one verified rewrite at a time."""

__version__ = "0.1.0"
