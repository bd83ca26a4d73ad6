"""Graph plumbing shared by every pass: conversion, node building, constant folding, rewiring."""

from graphfix.graph.build import Builder
from graphfix.graph.convert import to_graph, to_model
from graphfix.graph.fold import Folder
from graphfix.graph.rewire import replace_tensor, static_shape, tensor_dtype

__all__ = ["Builder", "Folder", "replace_tensor", "static_shape", "tensor_dtype", "to_graph", "to_model"]
