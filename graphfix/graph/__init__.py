"""Graph plumbing shared by every pass: conversion, node building, constant folding, rewiring."""

from graphfix.graph.build import Builder
from graphfix.graph.convert import to_graph, to_model
from graphfix.graph.rewire import is_read, replace_tensor, static_shape, tensor_dtype
from graphfix.graph.weights import is_empty, is_weights, optional_input

__all__ = [
    "Builder", "is_empty", "is_read", "is_weights", "optional_input", "replace_tensor", "static_shape", "tensor_dtype",
    "to_graph", "to_model",
]
