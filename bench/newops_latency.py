"""onnxruntime CPU latency of the opset 23-28 ops vs what their decompose passes write.

    python bench/newops_latency.py [--repeat 5]

One thread, best of ``repeat`` 0.1 s windows (bench/_latency.py), onnxruntime's default
optimisations. Shapes are a small decoder's: hidden 768, 8 heads of 128, a 2048-position cache.
SwiGLU is not timed: onnxruntime 1.32 has no kernel for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from graphfix import passes  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(op: str, inputs: list[tuple[str, int, list]], opset: int, inits=(), **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _, _ in inputs] + [t.name for t in inits], ["y"], **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", inputs[0][1], None)], list(inits))
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def cases() -> list[tuple[str, onnx.ModelProto, str, str | None, dict[str, np.ndarray]]]:
    r = np.random.default_rng(0)
    x = r.standard_normal((8, 512, 768)).astype(np.float32)
    scale = numpy_helper.from_array((1 + 0.1 * r.standard_normal(768)).astype(np.float32), "scale")
    rms = _model("RMSNormalization", [("x", F, [8, 512, 768])], 23, [scale], epsilon=1e-6)
    q = r.standard_normal((1, 8, 512, 128)).astype(np.float32)
    angles = r.uniform(-3, 3, (2048, 64))
    rope = _model("RotaryEmbedding", [("x", F, [1, 8, 512, 128]), ("cos", F, [2048, 64]), ("sin", F, [2048, 64]),
                                      ("pos", I64, [1, 512])], 23)
    rope_feeds = {"x": q, "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
                  "pos": np.arange(512, dtype=np.int64)[None]}
    past = r.standard_normal((4, 8, 2048, 128)).astype(np.float32)
    decode = _model("TensorScatter", [("past", F, [4, 8, 2048, 128]), ("update", F, [4, 8, 1, 128]), ("w", I64, [4])], 24)
    prefill = _model("TensorScatter", [("past", F, [4, 8, 2048, 128]), ("update", F, [4, 8, 512, 128])], 24)
    swish = _model("Swish", [("x", F, [8, 512, 768])], 24)
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    cp_short = _model("CumProd", [("x", F, [4096, 32])], 26, [axis])
    cp_long = _model("CumProd", [("x", F, [64, 2048])], 26, [axis])
    cp_int = _model("CumProd", [("x", I64, [64, 2048])], 26, [axis])
    u = r.uniform(0.99, 1.01, (64, 2048)).astype(np.float32)
    return [
        ("RMSNormalization (8,512,768): ReduceSum / count (--trt < 10.0)", rms, "rmsnorm-decompose", None, {"x": x}),
        ("RMSNormalization (8,512,768): ReduceMean, Pow (--trt 10.0-10.14)", rms, "rmsnorm-decompose", "10.1", {"x": x}),
        ("RotaryEmbedding (1,8,512,128), position_ids", rope, "rotary-embedding-decompose", None, rope_feeds),
        ("TensorScatter decode (4,8,2048,128) + 1, write_indices: row Gather", decode, "tensorscatter-decompose", None,
         {"past": past, "update": r.standard_normal((4, 8, 1, 128)).astype(np.float32), "w": np.array([5, 100, 7, 2000])}),
        ("TensorScatter prefill (4,8,2048,128) + 512: Concat/Slice", prefill, "tensorscatter-decompose", None,
         {"past": past, "update": r.standard_normal((4, 8, 512, 128)).astype(np.float32)}),
        ("Swish (8,512,768)", swish, "swish-decompose", None, {"x": x}),
        ("CumProd float (4096,32): Mul chain", cp_short, "cumprod-decompose", None, {"x": r.uniform(0.5, 1.5, (4096, 32)).astype(np.float32)}),
        ("CumProd float (64,2048): log-step scan", cp_long, "cumprod-decompose", None, {"x": u}),
        ("CumProd int64 (64,2048): log-step scan", cp_int, "cumprod-decompose", None, {"x": r.integers(-3, 4, (64, 2048))}),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("| graph | native us | decomposed us | ratio |")
    print("|---|---:|---:|---:|")
    for label, native, name, trt, feeds in cases():
        decomposed = passes.get(name).apply(native, trt=trt).model
        a, b = latency_us(native, feeds, args.repeat), latency_us(decomposed, feeds, args.repeat)
        print(f"| {label} | {a:.0f} | {b:.0f} | {b / a:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
