"""Body initializers named like a tensor of an enclosing graph, renamed apart.

ONNX lets an If branch or a Loop/Scan body declare an initializer whose name an enclosing graph
also uses (onnx's checker and onnxruntime accept it; inside the body the initializer wins): a
hand-written merged decoder returns an empty placeholder initializer named like the If's own
output. onnx-graphsurgeon's importer looks a body's initializers up in the enclosing graphs first
(``get_tensor(initializer)`` with ``check_outer_graph``) and so binds the body to the outer
tensor, value lost. Renaming such an initializer inside its body keeps the model's meaning (If
outputs bind by position, a body's names are its own) and gives the importer nothing to confuse.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def _graphs_of(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def _own_names(g: onnx.GraphProto) -> set[str]:
    return {t.name for t in g.initializer} | {i.name for i in g.input} | {o for n in g.node for o in n.output}


def _seen(name: str, scopes: list[set[str]]) -> bool:
    """Whether an enclosing graph (a stack of name sets, outermost first; never copied: a model of
    thousands of bodies would copy the main graph's names for each) uses ``name``."""
    return any(name in names for names in scopes)


def _shadowing(g: onnx.GraphProto, scopes: list[set[str]]) -> bool:
    """Whether any body below ``g`` (``scopes``: the names visible from above) declares a shadowing initializer."""
    scopes.append(_own_names(g))
    try:
        for n in g.node:
            for body in _graphs_of(n):
                if any(_seen(t.name, scopes) for t in body.initializer) or _shadowing(body, scopes):
                    return True
        return False
    finally:
        scopes.pop()


def unshadowed(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when no body initializer shadows an enclosing name, else a copy with each
    such initializer (and what reads it in its body) renamed ``<name>__local``, ``__local2``, ..."""
    if not _shadowing(model.graph, []):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _rename(copy.graph, [])
    return copy


def _rename(g: onnx.GraphProto, scopes: list[set[str]]) -> None:
    scopes.append(_own_names(g))
    for n in g.node:
        for body in _graphs_of(n):
            own = _own_names(body)
            renames: dict[str, str] = {}
            for t in body.initializer:
                if _seen(t.name, scopes):
                    new, k = f"{t.name}__local", 1
                    while new in own or _seen(new, scopes):
                        k += 1
                        new = f"{t.name}__local{k}"
                    own.add(new)
                    renames[t.name] = t.name = new
            if renames:
                _apply(body, renames)
            _rename(body, scopes)
    scopes.pop()


def _apply(g: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Every read of a renamed name in ``g`` and in the bodies below it that do not define the name
    themselves; ``g``'s outputs and value_infos of that name."""
    for n in g.node:
        n.input[:] = [renames.get(i, i) for i in n.input]
        for body in _graphs_of(n):
            inner = {k: v for k, v in renames.items() if k not in _own_names(body)}
            if inner:
                _apply(body, inner)
    for vi in (*g.output, *g.value_info):
        if vi.name in renames:
            vi.name = renames[vi.name]
