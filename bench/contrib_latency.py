"""onnxruntime CPU latency of onnxruntime's fused contrib ops against what the contrib lowerings
write, and of QOperator models against what qoperator-to-qdq writes, as ratios in one run.

    python bench/contrib_latency.py [--repeat 9] [--only NAME ...]

Rows: each fixtures/real/ortopt_*.onnx whole (every contrib-*-lower pass applied, the fixtures'
tiny configs at sequence 32 / 31 cached tokens + 1), each contrib op alone at BERT-base / Llama
sizes (hidden 768, 12 heads, sequence 128 and 512), and each fixtures/real/ortquant_*_qop_*.onnx
against its QDQ form. Before timing, both forms run on the same feeds and must agree
(assert_allclose; QDQ outputs within two quantization steps of the output's range), or the ratio
means nothing. One thread, onnxruntime's default optimizations (bench/_latency.py's session), best
of ``repeat`` 0.1 s windows per form, the two forms' windows interleaved; the lowered form is what TensorRT would see fused, so the CPU ratio bounds
its cost from above.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _latency import session, window_us  # noqa: E402

from graphfix import passes  # noqa: E402

CONTRIB_PASSES = ("contrib-norm-lower", "contrib-activation-lower", "contrib-matmul-lower", "contrib-attention-lower",
                  "contrib-rotary-lower")
FIXTURES = ROOT / "fixtures" / "real"
HIDDEN, HEADS, FFN = 768, 12, 3072
F32 = TensorProto.FLOAT
Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def lowered(model: onnx.ModelProto, names: tuple[str, ...] = CONTRIB_PASSES) -> onnx.ModelProto:
    for name in names:
        model = passes.get(name).apply(model).model
    return model


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _w(name: str, shape: list[int], scale: float = 0.05, seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array((scale * _rng(seed).standard_normal(shape)).astype(np.float32), name)


def _x(shape: list[int], seed: int = 1) -> np.ndarray:
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _ms_model(node: onnx.NodeProto, ins: list[tuple[str, int, list]], outs: list[tuple[str, int, list]],
              inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph([node], "contrib", [helper.make_tensor_value_info(*i) for i in ins],
                              [helper.make_tensor_value_info(*o) for o in outs], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _ms(op: str, inputs: list[str], outputs: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, domain="com.microsoft", **attrs)


def skip_layer_norm(seq: int) -> Case:
    shape = [1, seq, HIDDEN]
    node = _ms("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y"], epsilon=1e-12)
    inits = [_w("gamma", [HIDDEN], 1.0), _w("beta", [HIDDEN], 0.1, 1), _w("bias", [HIDDEN], 0.1, 2)]
    return _ms_model(node, [("x", F32, shape), ("skip", F32, shape)], [("y", F32, shape)], inits), \
        {"x": _x(shape), "skip": _x(shape, 2)}


def simplified_layer_norm(seq: int) -> Case:
    shape = [1, seq, HIDDEN]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"], epsilon=1e-6, axis=-1)
    return _ms_model(node, [("x", F32, shape)], [("y", F32, shape)], [_w("gamma", [HIDDEN], 1.0)]), {"x": _x(shape)}


def embed_layer_norm(seq: int) -> Case:
    ids = [1, seq]
    node = _ms("EmbedLayerNormalization", ["ids", "segments", "word", "position", "segment", "gamma", "beta", "mask"],
               ["y", "mask_index"], epsilon=1e-12)
    inits = [_w("word", [30522, HIDDEN]), _w("position", [512, HIDDEN], seed=1), _w("segment", [2, HIDDEN], seed=2),
             _w("gamma", [HIDDEN], 1.0, 3), _w("beta", [HIDDEN], 0.1, 4)]
    ins = [("ids", TensorProto.INT32, ids), ("segments", TensorProto.INT32, ids), ("mask", TensorProto.INT32, ids)]
    feeds = {"ids": _rng().integers(0, 30522, ids).astype(np.int32), "segments": (np.arange(seq) >= seq // 2)[None].astype(np.int32),
             "mask": np.ones(ids, np.int32)}
    return _ms_model(node, ins, [("y", F32, [1, seq, HIDDEN]), ("mask_index", TensorProto.INT32, [1])], inits), feeds


def attention(seq: int) -> Case:
    shape = [1, seq, HIDDEN]
    node = _ms("Attention", ["x", "w", "b", "mask"], ["y"], num_heads=HEADS)
    inits = [_w("w", [HIDDEN, 3 * HIDDEN]), _w("b", [3 * HIDDEN], seed=1)]
    mask = np.ones([1, seq], np.int32)
    mask[0, seq - seq // 8:] = 0  # right padding
    return _ms_model(node, [("x", F32, shape), ("mask", TensorProto.INT32, [1, seq])], [("y", F32, shape)], inits), \
        {"x": _x(shape), "mask": mask}


def multi_head_attention(seq: int) -> Case:
    shape = [1, seq, HIDDEN]
    node = _ms("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"], num_heads=HEADS)
    ins = [(n, F32, shape) for n in ("q", "k", "v")]
    return _ms_model(node, ins, [("y", F32, shape)], [_w("bias", [3 * HIDDEN])]), \
        {n: _x(shape, i) for i, n in enumerate(("q", "k", "v"))}


def group_query_attention(seq: int, past: int) -> Case:
    """Llama-style: 12 query heads over 4 KV heads of 64, rotary; a prompt (past 0) or one decoding step."""
    kv_heads, head = 4, 64
    names = ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin"]
    cache = [1, kv_heads, past, head]
    ins = [("q", F32, [1, seq, HIDDEN]), ("k", F32, [1, seq, kv_heads * head]), ("v", F32, [1, seq, kv_heads * head]),
           ("pk", F32, cache), ("pv", F32, cache), ("seqlens_k", TensorProto.INT32, [1]), ("total", TensorProto.INT32, [])]
    angles = np.arange(1024)[:, None] * (10000.0 ** (-np.arange(head // 2) / (head // 2)))[None]
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
    present = [1, kv_heads, past + seq, head]
    node = _ms("GroupQueryAttention", names, ["y", "present_key", "present_value"], num_heads=HEADS, kv_num_heads=kv_heads,
               do_rotary=1)
    outs = [("y", F32, [1, seq, HIDDEN]), ("present_key", F32, present), ("present_value", F32, present)]
    feeds = {"q": _x([1, seq, HIDDEN]), "k": _x([1, seq, kv_heads * head], 2), "v": _x([1, seq, kv_heads * head], 3),
             "pk": _x(cache, 4), "pv": _x(cache, 5), "seqlens_k": np.array([past + seq - 1], np.int32),
             "total": np.array(past + seq, np.int32)}
    return _ms_model(node, ins, outs, inits), feeds


def _activation(op: str, seq: int) -> Case:
    shape = [1, seq, FFN]
    return _ms_model(_ms(op, ["x", "bias"], ["y"]), [("x", F32, shape)], [("y", F32, shape)], [_w("bias", [FFN], 0.1)]), \
        {"x": _x(shape)}


def fused_matmul(seq: int) -> Case:
    """The attention scores the optimizer writes: alpha * Q @ K^T per head."""
    shape = [1, HEADS, seq, HIDDEN // HEADS]
    node = _ms("FusedMatMul", ["a", "b"], ["y"], transB=1, alpha=0.125)
    return _ms_model(node, [("a", F32, shape), ("b", F32, shape)], [("y", F32, [1, HEADS, seq, seq])], []), \
        {"a": _x(shape), "b": _x(shape, 2)}


def fused_conv() -> Case:
    """A ResNet stage's 3x3 Conv + Relu as onnxruntime's level-2 optimizations write it."""
    node = _ms("FusedConv", ["x", "w", "b"], ["y"], activation="Relu", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    inits = [_w("w", [64, 64, 3, 3]), _w("b", [64], seed=1)]
    return _ms_model(node, [("x", F32, [1, 64, 56, 56])], [("y", F32, [1, 64, 56, 56])], inits), {"x": _x([1, 64, 56, 56])}


def rotary_embedding(seq: int) -> Case:
    shape, head = [1, seq, HIDDEN], HIDDEN // HEADS
    angles = np.arange(1024)[:, None] * (10000.0 ** (-np.arange(head // 2) / (head // 2)))[None]
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
    node = _ms("RotaryEmbedding", ["x", "positions", "cos", "sin"], ["y"], num_heads=HEADS)
    return _ms_model(node, [("x", F32, shape), ("positions", TensorProto.INT64, [1, seq])], [("y", F32, shape)], inits), \
        {"x": _x(shape), "positions": np.arange(seq, dtype=np.int64)[None]}


OPS: list[tuple[str, Callable[[], Case]]] = [
    ("SkipLayerNormalization 1x128x768", lambda: skip_layer_norm(128)),
    ("SimplifiedLayerNormalization 1x128x768", lambda: simplified_layer_norm(128)),
    ("EmbedLayerNormalization 1x128, vocab 30522", lambda: embed_layer_norm(128)),
    ("Attention 1x128x768, 12 heads, mask", lambda: attention(128)),
    ("Attention 1x512x768, 12 heads, mask", lambda: attention(512)),
    ("MultiHeadAttention 1x128x768, 12 heads", lambda: multi_head_attention(128)),
    ("MultiHeadAttention 1x512x768, 12 heads", lambda: multi_head_attention(512)),
    ("GroupQueryAttention prompt 128, 12/4 heads, rotary", lambda: group_query_attention(128, 0)),
    ("GroupQueryAttention decode 1 after 511, 12/4 heads, rotary", lambda: group_query_attention(1, 511)),
    ("BiasGelu 1x128x3072", lambda: _activation("BiasGelu", 128)),
    ("FastGelu 1x128x3072", lambda: _activation("FastGelu", 128)),
    ("RotaryEmbedding 1x128x768, 12 heads", lambda: rotary_embedding(128)),
    ("FusedMatMul 12x128x64 @ (12x128x64)^T, alpha", lambda: fused_matmul(128)),
    ("FusedConv 1x64x56x56, 3x3, Relu", fused_conv),
]


def fixture_feeds(model: onnx.ModelProto, seq: int = 32, past: int = 31) -> dict[str, np.ndarray]:
    """Feeds for an optimizer/quantizer fixture: a prompt of ``seq`` tokens, or with a KV cache
    one new token after ``past`` (the tiny configs have 64 positions)."""
    names = {i.name for i in model.graph.input}
    decoding = any("past" in n for n in names)
    new, cached = (1, past) if decoding else (seq, 0)
    dims = {"batch_size": 1, "batch": 1, "sequence_length": new, "tokens": new, "past_sequence_length": cached,
            "past_sequence_length + sequence_length": cached + new, "num_channels": 3, "height": 32, "width": 32}
    feeds = {}
    for i, vi in enumerate(model.graph.input):
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype.kind == "f":
            feeds[vi.name] = _x(shape, i).astype(dtype)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones(shape, dtype)
        elif vi.name == "position_ids":
            feeds[vi.name] = (cached + np.arange(new, dtype=dtype))[None]
        elif vi.name == "token_type_ids":
            feeds[vi.name] = np.zeros(shape, dtype)
        else:
            feeds[vi.name] = _rng(i).integers(0, 64, shape).astype(dtype)
    return feeds


def _agree(native: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict[str, np.ndarray], quantized: bool) -> None:
    want, got = session(native).run(None, feeds), session(rewritten).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        w64, g64 = np.asarray(w, np.float64), np.asarray(g, np.float64)
        if quantized:  # requantization may land one step apart; the outputs here are floats after the last DQ
            atol = 2 * (w64.max() - w64.min()) / 255
            np.testing.assert_allclose(g64, w64, atol=atol, rtol=0)
        else:
            tol = 2e-2 if np.asarray(w).dtype == np.float16 else 2e-3
            np.testing.assert_allclose(g64, w64, atol=tol, rtol=tol)


def paired_us(native: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> tuple[float, float]:
    """Both forms' latency as bench/_latency.py's ``latency_us`` takes it (one-thread session, a
    warm-up run, best of 0.1 s windows), their windows interleaved so that load from other
    processes hits both alike."""
    sessions = [session(native), session(rewritten)]
    for sess in sessions:
        sess.run(None, feeds)
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for k, sess in enumerate(sessions):
            best[k] = min(best[k], window_us(sess, feeds))
    return best[0], best[1]


def rows(only: list[str] | None) -> list[tuple[str, Callable[[], tuple[onnx.ModelProto, onnx.ModelProto, dict, bool]]]]:
    out = []
    for path in sorted(FIXTURES.glob("ortopt_*.onnx")):
        def case(path: Path = path) -> tuple:
            m = onnx.load(path)
            return m, lowered(m), fixture_feeds(m), False
        out.append((path.stem, case))
    for label, build in OPS:
        def op_case(build: Callable[[], Case] = build) -> tuple:
            m, feeds = build()
            return m, lowered(m), feeds, False
        out.append((label, op_case))
    for path in sorted(FIXTURES.glob("ortquant_*_qop_*.onnx")):
        def qop_case(path: Path = path) -> tuple:
            m = onnx.load(path)
            return m, lowered(m, ("qoperator-to-qdq",)), fixture_feeds(m), True
        out.append((path.stem, qop_case))
    return [(name, case) for name, case in out if not only or any(o in name for o in only)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--only", nargs="*", help="rows whose name contains one of these")
    args = parser.parse_args(argv)
    print(f"{'case':60} {'native us':>10} {'lowered us':>11} {'ratio':>7}")
    for name, case in rows(args.only):
        native, rewritten, feeds, quantized = case()
        left = [n.op_type for n in rewritten.graph.node if n.domain == "com.microsoft" or n.op_type.startswith("QLinear")]
        _agree(native, rewritten, feeds, quantized)
        base, ours = paired_us(native, rewritten, feeds, args.repeat)
        note = f"  (left: {sorted(set(left))})" if left else ""
        print(f"{name:60} {base:10.0f} {ours:11.0f} {ours / base:6.2f}x{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
