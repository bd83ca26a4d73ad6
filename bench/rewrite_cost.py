"""What a rewrite costs at run time: every fixtures/real export x every release it is rewritten for.

A deployment engineer fixes a model to run it fast, so a rewrite that makes it several times
slower is a regression they would find in production. For each export and each target release
``--passes auto --trt V`` rewrites something for, this measures the fixed model against the
original on onnxruntime (CPU, one thread, best of interleaved windows, the same feeds: the ones
graphfix's verification chose) and, as figures that do not depend on this machine, the ratio of
floating-point operations and of bytes moved (each node's inputs and outputs) at those shapes.
A row slower than ``--limit`` (1.2x) is broken down pass by pass (each rewritten pass applied
alone) so the table names the pass that costs.

    python bench/rewrite_cost.py                       # every export, 8.2 8.5 8.6 10.1
    python bench/rewrite_cost.py --trt 8.5 --only swin raft --markdown
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _latency import session, window_us  # noqa: E402

import graphfix  # noqa: E402
from graphfix.graph.cost import Cost, node_cost  # noqa: E402 - the one estimate, also the report's


def _shapes_at(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], int]]:
    """(dims, elem_type) of every tensor at the feeds: one onnxruntime run of the model with every
    node output exposed (exact also where sizes depend on data, NonZero/TopK, which inference cannot give)."""
    import onnxruntime as ort

    from graphfix.onnxio.ir import runtime_compatible

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(o) for n in m.graph.node for o in n.output
                          if o and o not in have)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(runtime_compatible(m).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    known = {k: (tuple(v.shape), onnx.helper.np_dtype_to_tensor_dtype(v.dtype)) for k, v in feeds.items()}
    try:
        values = sess.run(names, feeds)
    except Exception:  # noqa: BLE001 - a model whose declared shapes are wrong (an input defect): costs unknown
        values, names = [], []
    for name, value in zip(names, values, strict=True):
        value = np.asarray(value)
        if value.dtype != object:
            known[name] = (tuple(value.shape), onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
    for t in m.graph.initializer:
        known[t.name] = (tuple(t.dims), t.data_type)
    return known


def model_cost(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Cost:
    """Floating-point operations and bytes moved by one run at the feeds' shapes (a device-independent
    figure: MatMul/Gemm/Conv by their multiply-adds, every other node one operation per element;
    graphfix.graph.cost, the estimate the report gives per rewritten region)."""
    known = _shapes_at(model, feeds)
    cost = Cost()
    for node in model.graph.node:
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        cost.add(node_cost(node.op_type, [known.get(i) for i in node.input if i], [known.get(o) for o in node.output if o],
                           trans_a))
    return cost


def timed(original: onnx.ModelProto, fixed: onnx.ModelProto, feeds: dict[str, np.ndarray], rounds: int) -> float:
    """fixed / original latency: windows of the two sessions interleaved, best of each, so that
    load on this machine falls on both alike."""
    sessions = [session(original), session(fixed)]
    for s in sessions:
        s.run(None, feeds)
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, s in enumerate(sessions):
            best[k] = min(best[k], window_us(s, feeds))
    return best[1] / best[0]


def rows_for(path: Path, trt: str, limit: float, rounds: int) -> list[dict]:
    model = onnx.load(str(path))
    result = graphfix.fix(model, "auto", trt=trt)
    kept = [p.name for p in result.report.passes if p.rewritten and p.verdict == "kept"]
    if not kept or not result.outcome.feeds:
        return []
    feeds = result.outcome.feeds[0]
    fixed = result.model
    ratio = timed(model, fixed, feeds, rounds)
    before, after = model_cost(model, feeds), model_cost(fixed, feeds)
    row = {"model": path.stem, "trt": trt, "passes": kept, "nodes": (len(model.graph.node), len(fixed.graph.node)),
           "latency": ratio, "flops": after.flops / max(before.flops, 1), "bytes": after.bytes / max(before.bytes, 1),
           "unknown": after.unknown, "by_pass": {}}
    if ratio > limit and len(kept) > 1:
        for name in kept:
            alone = graphfix.fix(model, [name], trt=trt, verify=False).model
            row["by_pass"][name] = timed(model, alone, feeds, rounds)
    return [row]


def markdown(rows: list[dict], limit: float) -> str:
    lines = ["| export | TensorRT | passes kept | nodes | latency ratio | FLOP ratio | bytes ratio | note |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        note = ""
        if r["latency"] > limit:
            worst = max(r["by_pass"].items(), key=lambda kv: kv[1]) if r["by_pass"] else (r["passes"][0], r["latency"])
            alone = f"{worst[0]} ({worst[1]:.2f}x alone)"
            note = f"slower: {alone}" if worst[1] > limit or not r["by_pass"] else f"slower only together (worst alone: {alone})"
        unknown = f" ({r['unknown']} nodes of data-dependent size not counted)" if r["unknown"] else ""
        lines.append(f"| {r['model']} | {r['trt']} | {', '.join(r['passes'])} | {r['nodes'][0]}→{r['nodes'][1]} | "
                     f"{r['latency']:.2f}x | {r['flops']:.2f}x | {r['bytes']:.2f}x{unknown} | {note} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trt", nargs="+", default=["8.2", "8.5", "8.6", "10.1"])
    ap.add_argument("--only", nargs="*", default=[], help="exports whose name contains one of these")
    ap.add_argument("--limit", type=float, default=1.2, help="latency ratio above which a row is broken down by pass")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing windows per model (best of)")
    args = ap.parse_args(argv)
    exports = sorted((ROOT / "fixtures" / "real").glob("*.onnx"))
    if args.only:
        exports = [p for p in exports if any(s in p.stem for s in args.only)]
    rows = []
    for path in exports:
        for trt in args.trt:
            rows += rows_for(path, trt, args.limit, args.rounds)
            if rows and rows[-1]["model"] == path.stem and rows[-1]["trt"] == trt:
                r = rows[-1]
                print(f"{r['model']} {trt}: {r['latency']:.2f}x latency, {r['flops']:.2f}x FLOPs, {r['bytes']:.2f}x bytes"
                      + (f" by pass {r['by_pass']}" if r["by_pass"] else ""), file=sys.stderr, flush=True)
    print(markdown(rows, args.limit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
