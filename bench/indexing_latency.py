"""onnxruntime CPU latency of GatherND / ScatterND / ScatterElements vs what the decompose passes write.

    python bench/indexing_latency.py [--repeat 5]

Cases (single-threaded onnxruntime, fp32, best of ``--repeat`` 0.1 s windows; ratio = decomposed / native):

* ``x[mask]`` on an (8, 512, 768) tensor, half the positions selected: NonZero -> Transpose ->
  GatherND (the dynamo pattern) vs the same with gathernd-decompose's linear index + Gather.
* SuperPoint-like descriptor write ``desc[0, :, ys, xs] = new`` with 1024 runtime keypoints into
  a 1x256x60x80 map. The legacy exporter moves the indexed (H, W) axes first, so the ScatterND
  sees data [60, 80, 1, 256], indices [1024, 2], updates [1024, 1, 256] (4800 rows of 256): the
  one-hot grid is 4800 x 1024. Measured on that layout (the Transposes around it are the same in
  both models and left out). Written element by element instead (indices [1024*256, 4] into the
  NCHW tensor) the grid would be 1.2M x 262k: over the limit, reported, not rewritten.
* KV-cache ``index_copy_`` of one position into a [2048, 1, 32, 128] (seq-first) cache.
* ``scatter_reduce(0, idx.expand, src, 'amax')``: 512 edges x 64 features into 100 nodes
  (ScatterElements, reduction max; grid 64 x 100 x 512).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from graphfix import passes  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bench", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def masking(rng):
    m = _model([helper.make_node("NonZero", ["mask"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
                helper.make_node("GatherND", ["x", "idx"], ["y"])],
               [_vi("x", F, ["b", "s", 768]), _vi("mask", B, ["b", "s"])], [_vi("y", F, ["n", 768])])
    return "gathernd-decompose", m, {"x": rng.standard_normal((8, 512, 768), np.float32), "mask": rng.random((8, 512)) > 0.5}


def superpoint_scatter(rng):
    m = _model([helper.make_node("ScatterND", ["desc", "yx", "new"], ["out"])],
               [_vi("desc", F, [60, 80, 1, 256]), _vi("yx", I64, [1024, 2]), _vi("new", F, [1024, 1, 256])], [_vi("out", F, [60, 80, 1, 256])])
    cells = rng.choice(60 * 80, 1024, replace=False)
    yx = np.stack([cells // 80, cells % 80], 1).astype(np.int64)
    return "scatternd-decompose", m, {"desc": rng.standard_normal((60, 80, 1, 256), np.float32), "yx": yx,
                                      "new": rng.standard_normal((1024, 1, 256), np.float32)}


def kv_cache(rng):
    m = _model([helper.make_node("ScatterND", ["cache", "pos", "k"], ["out"])],
               [_vi("cache", F, [2048, 1, 32, 128]), _vi("pos", I64, [1, 1]), _vi("k", F, [1, 1, 32, 128])], [_vi("out", F, [2048, 1, 32, 128])])
    return "scatternd-decompose", m, {"cache": rng.standard_normal((2048, 1, 32, 128), np.float32), "pos": np.array([[777]], np.int64),
                                      "k": rng.standard_normal((1, 1, 32, 128), np.float32)}


def scatter_amax(rng):
    m = _model([helper.make_node("ScatterElements", ["x", "idx", "src"], ["out"], axis=0, reduction="max")],
               [_vi("x", F, [100, 64]), _vi("idx", I64, [512, 64]), _vi("src", F, [512, 64])], [_vi("out", F, [100, 64])])
    idx = np.repeat(rng.integers(0, 100, (512, 1)), 64, axis=1).astype(np.int64)
    return "scatterelements-decompose", m, {"x": rng.standard_normal((100, 64), np.float32), "idx": idx,
                                            "src": rng.standard_normal((512, 64), np.float32)}


CASES = {
    "x[mask], (8, 512, 768)": masking,
    "ScatterND 1024 keypoints into 1x256x60x80": superpoint_scatter,
    "ScatterND KV-cache 1 of 2048 positions": kv_cache,
    "ScatterElements amax 512 edges x 64 into 100": scatter_amax,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("| case | native µs | decomposed µs | decomposed / native | nodes |")
    print("|---|---:|---:|---:|---:|")
    for name, build in CASES.items():
        pass_name, m, feeds = build(np.random.default_rng(0))
        result = passes.get(pass_name).apply(m)
        assert result.rewritten == 1, result.findings
        sess_native = latency_us(m, feeds, args.repeat)
        sess_decomposed = latency_us(result.model, feeds, args.repeat)
        print(f"| {name} | {sess_native:.0f} | {sess_decomposed:.0f} | {sess_decomposed / sess_native:.2f}x | {result.nodes_after} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
