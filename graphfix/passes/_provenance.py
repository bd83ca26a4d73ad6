"""Where a value that is not constant comes from, for the findings of the passes that need a
constant (fold-weights, aten-fallback). Here so that no pass module imports another."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder

_RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


def runtime_path(t: gs.Tensor, folder: Folder) -> str:
    """Where a non-constant value comes from: the source, then the nodes down to ``t``.

    Follows the first non-constant input of each producer, so the path ends at a graph input, a
    Shape/Size of dynamic dims, a random op, a custom op or a value too large to fold.
    """
    path: list[gs.Node] = []
    cur = t
    source = ""
    while not source:
        producer = cur.inputs[0] if isinstance(cur, gs.Variable) and cur.inputs else None
        if producer is None:
            source = f"graph input '{cur.name}'" if cur.name else "an absent input"
            break
        path.append(producer)
        pending = [i for i in producer.inputs if i.name and not isinstance(i, gs.Constant) and folder.value(i) is None]
        if producer.op in ("Shape", "Size"):
            source = f"the dynamic dims of '{producer.inputs[0].name}'"
        elif producer.op in _RANDOM:
            source = "random values"
        elif (producer.domain or "") not in ("", "ai.onnx"):
            source = f"custom op {producer.domain}::{producer.op}"
        elif any(isinstance(v, gs.Graph) for v in producer.attrs.values()):
            source = f"the subgraph of {producer.op} '{producer.name}'"
        elif not pending:
            source = f"{producer.op} '{producer.name}', whose value cannot be evaluated or exceeds {folder.max_elements} elements"
        else:
            cur = pending[0]
    return source + "".join(f" -> {n.op} '{n.name}'" for n in reversed(path))
