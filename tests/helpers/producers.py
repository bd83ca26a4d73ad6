"""Small models in the conventions of producers other than torch.onnx: declared dims of -1
(older paddle2onnx) or 0 (spox, TorchScript-derived), onnxruntime's contrib ops (its transformer
optimizer's SimplifiedLayerNormalization in the ONNX domain, com.microsoft FastGelu and
SkipLayerNormalization, which graphfix lowers; com.microsoft Inverse and the ONNX-domain Affine,
which it does not), opset imports of domains no node uses (paddle2onnx, old quantizers).

Each has Unsqueeze/Squeeze axes computed (Constant -> Cast), which fold-weights rewrites for
TensorRT 8.5 to 10.1 ("axes input must be an initializer"), so that ``--passes auto`` rewrites and
verifies with the rest of the model present."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 8
#: The domains an old onnxruntime quantizer and paddle2onnx import without using them.
UNUSED_DOMAINS = ("Paddle", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "com.microsoft.mlfeaturizers",
                  "com.microsoft.experimental", "com.microsoft.dml")


def _computed_axes(x: str, y: str) -> list[onnx.NodeProto]:
    """Squeeze(Unsqueeze(x, axes), axes) with axes = Cast(Constant(int32 [0])): an identity."""
    return [helper.make_node("Constant", [], ["a32"], value=numpy_helper.from_array(np.array([0], np.int32))),
            helper.make_node("Cast", ["a32"], ["axes"], to=TensorProto.INT64),
            helper.make_node("Unsqueeze", [x, "axes"], ["u"], name="unsqueeze"),
            helper.make_node("Squeeze", ["u", "axes"], [y], name="squeeze")]


def _model(nodes, inits, dims, domains=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(g, opset_imports=imports, ir_version=8, producer_name="graphfix-tests")


def declared_dim_model(value: int, where: str = "input") -> onnx.ModelProto:
    """Relu -> Unsqueeze/Squeeze on x [batch, 8] whose batch dim is declared ``value`` on the graph input, or
    on the value_info of the Relu's output (the input then says 'batch')."""
    m = _model([helper.make_node("Relu", ["x"], ["r"]), *_computed_axes("r", "y")], [], ["batch", HIDDEN])
    if where == "input":
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = value
    else:
        m.graph.value_info.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, HIDDEN]))
        m.graph.value_info[0].type.tensor_type.shape.dim[0].dim_value = value
    return m


def _weights(*names: str) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32), n) for n in names]


def simplified_layernorm_model() -> onnx.ModelProto:
    """Unsqueeze/Squeeze -> SimplifiedLayerNormalization (ONNX domain, as onnxruntime's optimizer writes it)."""
    nodes = [*_computed_axes("x", "c"), helper.make_node("SimplifiedLayerNormalization", ["c", "w"], ["y"], name="rms",
                                                axis=-1, epsilon=1e-6)]
    return _model(nodes, _weights("w"), ["batch", 4, HIDDEN])


def microsoft_model() -> onnx.ModelProto:
    """Unsqueeze/Squeeze -> com.microsoft FastGelu -> com.microsoft SkipLayerNormalization."""
    nodes = [*_computed_axes("x", "c"),
             helper.make_node("FastGelu", ["c", "bias"], ["f"], name="gelu", domain="com.microsoft"),
             helper.make_node("SkipLayerNormalization", ["f", "x", "gamma", "beta"], ["y"], name="skip_ln",
                              domain="com.microsoft", epsilon=1e-5)]
    return _model(nodes, _weights("bias", "gamma", "beta"), ["batch", 4, HIDDEN], domains=["com.microsoft"])


def unlowered_microsoft_model() -> onnx.ModelProto:
    """Unsqueeze/Squeeze -> com.microsoft Inverse on x [batch, 4, 4]: a contrib op no pass lowers."""
    nodes = [*_computed_axes("x", "c"), helper.make_node("Inverse", ["c"], ["y"], name="inverse", domain="com.microsoft")]
    return _model(nodes, [], ["batch", 4, 4], domains=["com.microsoft"])


def unlowered_onnx_domain_model() -> onnx.ModelProto:
    """Affine at opset 9: an onnxruntime contrib op in the ONNX domain that no pass lowers and no
    release imports (ScaledTanh and ParametricSoftplus have importers)."""
    nodes = [helper.make_node("Affine", ["x"], ["y"], name="affine", alpha=1.5, beta=0.5)]
    return _model(nodes, [], ["batch", HIDDEN], opset=9)


def unused_domains_model() -> onnx.ModelProto:
    """Relu -> Unsqueeze/Squeeze importing every domain of UNUSED_DOMAINS, none of them used."""
    return _model([helper.make_node("Relu", ["x"], ["r"]), *_computed_axes("r", "y")], [], ["batch", HIDDEN],
                  domains=UNUSED_DOMAINS, opset=13)
