"""scan-normalize: a Scan in the form every TensorRT Scan importer reads, non-negative scan axes
and at least one state variable.

Why: ``DEFINE_BUILTIN_OP_IMPORTER(Scan)`` (builtin_op_importers.cpp 7.0..9.3, onnxOpImporters.cpp
10.0-GA, 10.1-GA, main@7ecb49a) refuses two forms that ONNX and onnxruntime accept:

* a Scan with no state variable (a map over its scan inputs, what an official ONNX function's
  body or a jax ``lax.map`` writes): from 7.1 it calls ``ctx->registerLayer(stateVars.at(0), ...)``,
  which throws std::out_of_range ("vector::_M_range_check"; 'Invalid Node' from 8.0-GA, an abort
  before);
* a negative ``scan_input_axes`` / ``scan_output_axes`` entry: it normalizes them with
  ``convertAxis(axis, nvinfer1::Dims::MAX_DIMS)``, so -1 becomes 7, outside the tensor, for the
  IIteratorLayer / ILoopOutputLayer axis.

Both releases that refuse them accept the same Scan written otherwise, so the Scan is kept (its
iterators, reverse directions and output axes are TensorRT's own loop layers) rather than
expanded into a Loop: a Loop that gathers one slice per iteration would read its iteration number,
which 7.0 and 7.1 mis-import (graphfix/check/loops.py), and add a Gather per iteration.

Rewrite: each negative axis becomes axis + rank (a scan input's rank for ``scan_input_axes``, the
body's scan output's rank + 1 for ``scan_output_axes``; a rank that is not known leaves the node
as a finding); a Scan with no state variable gets one, a FLOAT scalar 0 the body passes on through
an Identity, whose final value is a new first output nothing reads. Exact: the other outputs are
the same computation. Scan-8 (opset 8: batched, ``sequence_lens``) is left alone.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph.build import Skip
from graphfix.graph.importer import copy_body
from graphfix.passes.base import LIMIT, Context, Pass, Rule

_AXES = ("scan_input_axes", "scan_output_axes")
#: TensorRT's Dims::MAX_DIMS, which the importer adds to a negative axis.
MAX_DIMS = 8


def _body(node: gs.Node) -> gs.Graph | None:
    body = node.attrs.get("body")
    return body if isinstance(body, gs.Graph) else None


def _state_count(node: gs.Node) -> int:
    return len(node.inputs) - int(node.attrs.get("num_scan_inputs", 0))


def _without_state(node: gs.Node, ctx: Context) -> bool:
    return ctx.opset > 8 and _body(node) is not None and _state_count(node) <= 0


def _negative_axes(node: gs.Node, ctx: Context) -> bool:
    return ctx.opset > 8 and any(int(a) < 0 for attr in _AXES for a in node.attrs.get(attr) or ())


def rewrite(node: gs.Node, ctx: Context) -> None:
    body = _body(node)
    if body is None:
        raise Skip("the Scan has no body graph")
    states = _state_count(node)
    if _negative_axes(node, ctx):
        _write_axes(node, body, max(states, 0))
    if states <= 0:
        _add_state(node, body, ctx)


def _write_axes(node: gs.Node, body: gs.Graph, states: int) -> None:
    """Each negative axis as axis + rank (new lists: the edit log keeps the old attribute values)."""
    ranked = {"scan_input_axes": [t.shape for t in node.inputs[states:]],
              "scan_output_axes": [None if t.shape is None else [*t.shape, None] for t in body.outputs[states:]]}
    for attr in _AXES:
        axes = node.attrs.get(attr)
        if not axes or all(int(a) >= 0 for a in axes):
            continue
        written = []
        for k, a in enumerate(axes):
            shape = ranked[attr][k] if k < len(ranked[attr]) else None
            if int(a) < 0 and shape is None:
                raise Skip(f"{attr}[{k}] is {a} and the rank it counts from is unknown (run shape inference upstream, "
                           "or write the axis as non-negative in the export)")
            written.append(int(a) + len(shape) if int(a) < 0 else int(a))
        node.attrs[attr] = written


def _add_state(node: gs.Node, body: gs.Graph, ctx: Context) -> None:
    """A FLOAT scalar carried unchanged (FLOAT: the type every release's Scan table lists), in a
    copy of the body installed in its place (the edit log restores the old one on undo)."""
    b = ctx.builder
    body = copy_body(body)
    state_in = gs.Variable(b.name("scan_state_in"), dtype=np.float32, shape=[])
    state_out = gs.Variable(b.name("scan_state_out"), dtype=np.float32, shape=[])
    body.nodes.append(gs.Node("Identity", name=b.name("scan_state_carry"), inputs=[state_in], outputs=[state_out]))
    body.inputs.insert(0, state_in)
    body.outputs.insert(0, state_out)
    node.attrs["body"] = body
    node.inputs.insert(0, b.const(np.zeros((), np.float32), hint="scan_state"))
    node.outputs.insert(0, gs.Variable(b.name("scan_state_final"), dtype=np.float32, shape=[]))


_SRC = "DEFINE_BUILTIN_OP_IMPORTER(Scan)"
PASS = Pass(
    name="scan-normalize",
    summary="Give a Scan non-negative scan axes and at least one state variable, the form every Scan importer reads.",
    ops=frozenset({"Scan"}),
    rules=(
        Rule(LIMIT, ">=7.1", "a Scan with no state variable: the importer's registerLayer(stateVars.at(0), ...) throws "
             "std::out_of_range ('vector::_M_range_check')", _without_state,
             evidence=f"{_SRC}: ctx->registerLayer(stateVars.at(0), ...), builtin_op_importers.cpp 7.1, 7.2.1, "
                      "8.0-GA..8.6-GA, 9.0-GA, 9.3, onnxOpImporters.cpp 10.0-GA, 10.1-GA, main@7ecb49a (7.0 has no "
                      "registerLayer); ModelImporter.cpp parseGraph's catch reports it as 'Invalid Node' from 8.0-GA, "
                      "7.x aborts"),
        Rule(LIMIT, ">=7.0", f"negative scan axes: the importer adds {MAX_DIMS} (Dims::MAX_DIMS), not the rank, so axis "
             f"-1 becomes {MAX_DIMS - 1}, outside the tensor", _negative_axes,
             evidence=f"{_SRC}: CHECK(convertAxis(axis, nvinfer1::Dims::MAX_DIMS)) on "
                      "scan_input_axes and scan_output_axes (onnx2trt_utils.cpp 7.0..9.3, importerUtils.cpp 10.0-GA.."
                      "main@7ecb49a: axis += nbDims), builtin_op_importers.cpp 7.0..9.3, onnxOpImporters.cpp 10.0-GA, "
                      "10.1-GA, main@7ecb49a"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
