"""``--fix-shapes name:1x3x320x320``: freeze input dims and fold the shape arithmetic that becomes constant.

A detector exported with dynamic H/W but deployed at one size still carries the computed TopK K
(``min(pre_nms_top_n, num_anchors)``), Resize sizes and Pad amounts that parsers before 8.6 want
as initializers ("K must be an initializer", "pads must be initializers"). Freezing the dims the
user deploys at and folding what then becomes constant removes those patterns at their source,
as polygraphy's and onnxsim's "overwrite input shapes" do. The frozen model is verified against
the original at the frozen shapes like a pass (:func:`graphfix.pipeline.run.run`), and kept only
when the two agree.
"""

from __future__ import annotations

import onnx

from graphfix.errors import GraphfixError
from graphfix.graph.convert import to_graph, to_model

Shapes = dict[str, tuple[int, ...]]
#: Folded constants above this many bytes are left computed (a folded weight would grow the model).
FOLD_LIMIT = 1 << 20


def check(model: onnx.ModelProto, shapes: Shapes) -> None:
    """Every name is a graph input and every given dim fits its declared one."""
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, dims in shapes.items():
        vi = inputs.get(name)
        if vi is None:
            raise GraphfixError(f"--fix-shapes names unknown input {name!r} (inputs: {', '.join(inputs)})")
        declared = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        if len(declared) != len(dims) or any(d is not None and d != g for d, g in zip(declared, dims, strict=False)):
            shown = "x".join("?" if d is None else str(d) for d in declared)
            raise GraphfixError(f"--fix-shapes {name}:{'x'.join(map(str, dims))} does not fit the input's shape {shown}")


def freeze(model: onnx.ModelProto, shapes: Shapes) -> tuple[onnx.ModelProto, int]:
    """The model with these input dims fixed and the constant-foldable nodes folded (onnx-
    graphsurgeon's ``fold_constants`` with shapes, evaluated by onnxruntime). Returns it and
    how many nodes went away."""
    check(model, shapes)
    work = onnx.ModelProto()
    work.CopyFrom(model)
    for vi in work.graph.input:
        if vi.name in shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=True):
                d.Clear()
                d.dim_value = v
    del work.graph.value_info[:]  # stale symbolic shapes: the import infers them again
    graph = to_graph(work)
    before = len(graph.nodes)
    graph.fold_constants(fold_shapes=True, size_threshold=FOLD_LIMIT, error_ok=True).cleanup(remove_unused_graph_inputs=False)
    frozen = to_model(graph, work)
    return frozen, before - len(frozen.graph.node)
