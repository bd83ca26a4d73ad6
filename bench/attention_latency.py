"""onnxruntime CPU latency of ONNX Attention (opset 23) vs what attention-decompose writes.

    python bench/attention_latency.py [--repeat 5]

Q/K/V (1, 8, 512, 64) fp32, single-threaded, best of repeated windows (bench/_latency.py): causal
without a mask (the decomposition adds a constant position bias, no row guard), and with a BOOL
padding mask [1, 1, 512, 512] (a Where for the bias, and the fully-masked-row guard: TopK + Where).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from graphfix import passes  # noqa: E402

B, H, S, D = 1, 8, 512, 64


def _attention(masked: bool):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, S, D]) for n in "qkv"]
    names = ["q", "k", "v"]
    if masked:
        ins.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [B, 1, S, S]))
        names.append("mask")
    attrs = {} if masked else {"is_causal": 1}
    graph = helper.make_graph([helper.make_node("Attention", names, ["y"], **attrs)], "attention", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, S, D])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((B, H, S, D), np.float32) for n in "qkv"}
    print(f"Attention (B, H, S, D) = {(B, H, S, D)}, fp32, onnxruntime CPU, 1 thread; microseconds")
    for masked in (False, True):
        model = _attention(masked)
        run = dict(feeds, mask=rng.random((B, 1, S, S)) > 0.1) if masked else feeds
        decomposed = passes.get("attention-decompose").apply(model).model
        native, ours = latency_us(model, run, args.repeat), latency_us(decomposed, run, args.repeat)
        label = "BOOL mask" if masked else "is_causal"
        print(f"{label:10} native {native:9.0f}  decomposed {ours:9.0f}  ({ours / native:.2f}x, "
              f"{len(decomposed.graph.node)} nodes)")


if __name__ == "__main__":
    main(sys.argv[1:])
