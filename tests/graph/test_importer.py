"""The linear importer builds what onnx-graphsurgeon's importer + the typing walk build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphfix.graph.convert import infer
from graphfix.graph.importer import _Import, _NotCovered, fingerprint, gs_import, import_typed
from graphfix.onnxio.infer import value_infos

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "fixtures").rglob("*.onnx"))


def _tensor(t: gs.Tensor) -> tuple:
    if isinstance(t, gs.Constant):
        v = t._values
        data = getattr(v, "tensor", None)
        return ("C", t.name, str(t.dtype), tuple(t.shape), t.data_location,
                data.SerializeToString() if data is not None else np.asarray(v).tobytes())
    return ("V", t.name, str(t.dtype), None if t.shape is None else tuple(t.shape), t.type)


def describe(g: gs.Graph) -> tuple:
    """Everything a pass can see: nodes, attributes, tensors with types, producers/consumers,
    and which uses share one tensor object."""
    ids: dict[int, int] = {}

    def ref(t: gs.Tensor) -> tuple:
        return (ids.setdefault(id(t), len(ids)), *_tensor(t))

    node_ix = {id(n): k for k, n in enumerate(g.nodes)}

    def attr(v):
        if isinstance(v, gs.Tensor):
            return _tensor(v)
        return (type(v).__name__, v)

    nodes = [(n.op, n.name, n.domain, sorted((k, attr(v)) for k, v in n.attrs.items()),
              [ref(t) for t in n.inputs], [ref(t) for t in n.outputs]) for n in g.nodes]
    links = sorted((ref(t)[0], tuple(node_ix[id(p)] for p in t.inputs), tuple(node_ix[id(c)] for c in t.outputs))
                   for n in g.nodes for t in [*n.inputs, *n.outputs])
    return (nodes, [ref(t) for t in g.inputs], [ref(t) for t in g.outputs], links, g.name, g.doc_string, g.opset,
            g.producer_name, g.producer_version, g.ir_version, list(g.import_domains or []))


def both(model: onnx.ModelProto) -> tuple[tuple, tuple]:
    infos = value_infos(infer(model))
    return describe(_Import(model, infos).graph()), describe(gs_import(model, infos))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_same_graph_as_onnx_graphsurgeon_on_every_fixture(path):
    model = onnx.load(str(path))
    try:
        fast, reference = both(model)
    except _NotCovered:
        pytest.skip("subgraphs or attribute types the linear importer leaves to onnx-graphsurgeon")
    assert fast == reference


@pytest.mark.parametrize("path", FIXTURES[::8], ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_fingerprints_recorded_at_import_match_the_nodes(path):
    """Otherwise the export would rebuild every node instead of reusing its proto."""
    model = onnx.load(str(path))
    graph, sources = import_typed(model, infer(model))
    assert len(sources) == len(graph.nodes) == len(model.graph.node)
    for n, p in zip(graph.nodes, model.graph.node, strict=True):
        assert sources[id(n)][0] is p or sources[id(n)][0] == p
        assert sources[id(n)][1] == fingerprint(n)


def _edge_model() -> onnx.ModelProto:
    """Declared types the inference overrides, a repeated value_info, an omitted optional input,
    an initializer listed as input (IR 3), string/tensor/list attributes, bf16 and a custom domain."""
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    pads = numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Pad", ["m", "pads", ""], ["p"], name="pad", mode="constant"),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([1.5], np.float32), "cv")),
        helper.make_node("Add", ["p", "c"], ["a"]),
        helper.make_node("Cast", ["a"], ["b"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["y"], ["z"], perm=[1, 0]),
        helper.make_node("Custom", ["z"], ["q", ""], domain="my.ops", names=["a", "b"], scale=0.5),
    ]
    graph = helper.make_graph(
        nodes, "edges",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2]), helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None), helper.make_tensor_value_info("q", TensorProto.UNDEFINED, None)],
        [w, pads],
        value_info=[helper.make_tensor_value_info("m", TensorProto.FLOAT, None), helper.make_tensor_value_info("m", TensorProto.FLOAT, ["n", 3]),
                    helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)], ir_version=3)


def test_same_graph_on_edge_cases():
    model = _edge_model()
    fast, reference = both(model)
    assert fast == reference
    graph, sources = import_typed(model, infer(model))
    assert [sources[id(n)][1] for n in graph.nodes] == [fingerprint(n) for n in graph.nodes]


def test_subgraphs_go_through_onnx_graphsurgeon():
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    infos = value_infos(infer(model))
    with pytest.raises(_NotCovered):
        _Import(model, infos).graph()
    assert describe(import_typed(model, infer(model))[0]) == describe(gs_import(model, infos))
