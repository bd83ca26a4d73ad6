"""castlike-to-cast: CastLike(x, like) as Cast(x, to=<like's element type>).

Why: TensorRT parsers before 9.1 have no CastLike importer ("No importer registered for op:
CastLike"; the operator table lists it N in 9.0 and absent before). The dynamo exporter's
torchlib functions use CastLike to give scalar constants the type of a tensor operand
(``aten::add`` with ``alpha``, ``clamp``, ``where`` with a Python scalar, ...), and the ones whose
``like`` operand is not a constant survive onnxscript's optimizer.

Rewrite: the element type of ``like`` is known statically (ONNX type inference needs it too), so
the node becomes a Cast to that type with the same attributes (``saturate``, ``round_mode``),
which is what CastLike is defined as. Bit-exact; a ``like`` of unknown type is left as a
finding.
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    to = _element_type(node.inputs[1])
    if to is None:
        raise Skip("the type of CastLike's second input is unknown (run shape inference upstream)")
    out = ctx.builder.op("Cast", [node.inputs[0]], {**node.attrs, "to": to}, dtype=node.inputs[1].dtype)
    replace_tensor(ctx.graph, node.outputs[0], out)


def _element_type(t: gs.Tensor) -> int | None:
    """The ONNX element type (onnx-graphsurgeon keeps float8/int4/... as the ONNX enum: no numpy twin)."""
    if isinstance(t.dtype, int):
        return t.dtype or None
    dtype = tensor_dtype(t)
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(dtype) if dtype is not None else None
    except (KeyError, TypeError, ValueError):
        return None


PASS = Pass(
    name="castlike-to-cast",
    summary="Rewrite CastLike (dynamo exports) into a Cast to the second input's element type.",
    ops=frozenset({"CastLike"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<9.1", "no CastLike importer", error="unsupported-op-plugin-fallback-generic",
             evidence="operator table (first Y in 9.1)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
