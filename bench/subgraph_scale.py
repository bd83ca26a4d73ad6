"""Are walks of If/Loop bodies linear in the total node count? bench/scale.py's MatMul -> Clip
chain (every Clip's bound a Constant -> Cast that fold-clip folds) cut into segments of
``--segment`` blocks, each segment nested three deep: an If on a graph input whose then-branch is a
one-iteration Loop whose body holds an If whose then-branch is the segment (the else-branches pass
the value through), its weights in the main graph (read from the outer scope, as an optimum merged
decoder's are) or, with ``--weights inner``, in the innermost branch (as tf2onnx writes a
while_loop's). Nearly every node is in a body and the number of bodies grows with the model.

Times (CPU seconds of this process: other jobs on a shared machine stretch wall time)
``graphfix.fix(path, passes="all", verify=False)`` (import, every pass in every body, the
export) and ``graphfix.check`` in this process for each size, best of ``--repeat``, and, apart,
onnx's own shape inference of the model as graphfix's import runs it (on the weightless copy, small
weights kept, data propagation on): onnx carries what the enclosing graphs define into each body
it infers, so with the weights in the main graph that step alone grows faster than the model. The last line is the ratio of the largest size's times to the smallest's (linear: the ratio
of their node counts).

    python bench/subgraph_scale.py                          # 10k and 40k nodes
    python bench/subgraph_scale.py --nodes 2000 8000 --profile prof.out   # cProfile of the last size
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's graphfix, not an installed one

import graphfix  # noqa: E402
from graphfix.check.findings import check_model  # noqa: E402
from graphfix.onnxio.infer import inferred  # noqa: E402
from graphfix.onnxio.proto import weightless  # noqa: E402

COND = "use_branch"


def _vi(name: str, dim: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, dim])


def _segment(s: int, blocks: int, x: str, dim: int, weights: list[onnx.TensorProto], rng: np.random.Generator,
             inner: bool) -> onnx.GraphProto:
    """The innermost then-branch: ``blocks`` MatMul -> Clip blocks from ``x`` (an outer name), its
    weights appended to ``weights`` or, ``inner``, its own."""
    own: list[onnx.TensorProto] = []
    nodes = []
    for k in range(blocks):
        p, w = f"s{s}b{k}", f"w_s{s}b{k}"
        (own if inner else weights).append(numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w))
        nodes += [helper.make_node("MatMul", [x, w], [f"{p}m"], name=f"/{p}/MatMul"),
                  helper.make_node("Constant", [], [f"{p}lo"], name=f"/{p}/lo", value=numpy_helper.from_array(np.array(-1.0, np.float64))),
                  helper.make_node("Cast", [f"{p}lo"], [f"{p}lof"], name=f"/{p}/Cast", to=TensorProto.FLOAT),
                  helper.make_node("Clip", [f"{p}m", f"{p}lof"], [f"{p}y"], name=f"/{p}/Clip")]
        x = f"{p}y"
    return helper.make_graph(nodes, f"s{s}_then", [], [_vi(x, dim)], own)


def _passthrough(name: str, x: str, out: str, dim: int) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node("Identity", [x], [out], name=f"/{out}/Identity")], name, [], [_vi(out, dim)])


def nested(nodes: int, segment: int, dim: int, inner: bool = False) -> onnx.ModelProto:
    """About ``nodes`` nodes in segments of ``segment`` blocks, each If -> Loop -> If deep."""
    rng = np.random.default_rng(0)
    weights: list[onnx.TensorProto] = [numpy_helper.from_array(np.array(1, np.int64), "one_trip")]
    top, x = [], "x"
    for s in range(max(1, nodes // (4 * segment + 5))):
        inner = helper.make_node("If", [COND], [f"s{s}_inner"], name=f"/s{s}/If_inner",
                                 then_branch=_segment(s, segment, f"s{s}_carried", dim, weights, rng, inner),
                                 else_branch=_passthrough(f"s{s}_inner_else", f"s{s}_carried", f"s{s}_inner_else_y", dim))
        keep = helper.make_node("Identity", [f"s{s}_cond"], [f"s{s}_cond_out"], name=f"/s{s}/keep")
        body = helper.make_graph([keep, inner], f"s{s}_body",
                                 [helper.make_tensor_value_info(f"s{s}_i", TensorProto.INT64, []),
                                  helper.make_tensor_value_info(f"s{s}_cond", TensorProto.BOOL, []), _vi(f"s{s}_carried", dim)],
                                 [helper.make_tensor_value_info(f"s{s}_cond_out", TensorProto.BOOL, []), _vi(f"s{s}_inner", dim)])
        loop = helper.make_node("Loop", ["one_trip", "", x], [f"s{s}_looped"], name=f"/s{s}/Loop", body=body)
        then = helper.make_graph([loop], f"s{s}_outer_then", [], [_vi(f"s{s}_looped", dim)])
        top.append(helper.make_node("If", [COND], [f"s{s}_y"], name=f"/s{s}/If_outer", then_branch=then,
                                    else_branch=_passthrough(f"s{s}_outer_else", x, f"s{s}_outer_else_y", dim)))
        x = f"s{s}_y"
    graph = helper.make_graph(top, "nested", [_vi("x", dim), helper.make_tensor_value_info(COND, TensorProto.BOOL, [])],
                              [_vi(x, dim)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def count(graph: onnx.GraphProto) -> int:
    return len(graph.node) + sum(count(a.g) for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)


def timed(path: Path, out: Path, repeat: int, profile: str | None) -> tuple[float, float, float]:
    """Best (fix seconds, check seconds, onnx inference seconds) of ``repeat`` runs."""
    fixes, checks, infers = [], [], []
    work = weightless(onnx.load(str(path)))  # what graphfix's import infers: small weights kept
    for k in range(repeat):
        profiler = cProfile.Profile() if profile and k == repeat - 1 else None
        start = time.process_time()
        if profiler:
            profiler.enable()
        result = graphfix.fix(path, passes="all", verify=False)
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        fixes.append(time.process_time() - start)
        clips = next(p.rewritten for p in result.report.passes if p.name == "fold-clip")
        start = time.process_time()
        check_model(result.model, "8.5")
        checks.append(time.process_time() - start)
        onnx.save(result.model, str(out))
        start = time.process_time()
        inferred(work)
        infers.append(time.process_time() - start)
    if clips == 0:
        raise SystemExit(f"{path}: fold-clip rewrote nothing in the bodies")
    return min(fixes), min(checks), min(infers)


def main(argv: list[str]) -> int:
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[10000, 40000])
    ap.add_argument("--segment", type=int, default=10, help="MatMul -> Clip blocks per innermost branch")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--weights", choices=["outer", "inner"], default="outer",
                    help="the segments' weights in the main graph (outer) or in the innermost branches")
    ap.add_argument("--profile", help="write a cProfile of the last size's last fix here")
    args = ap.parse_args(argv)
    print("| weights | nodes | in bodies | bodies | fix CPU s | check CPU s | onnx inference CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, n in enumerate(args.nodes):
            model = nested(n, args.segment, args.dim, args.weights == "inner")
            path = Path(tmp, f"nested{n}.onnx")
            onnx.save(model, str(path))
            total = count(model.graph)
            bodies = 5 * len(model.graph.node)  # per segment: two If branches, the Loop body, two If branches
            last = k == len(args.nodes) - 1
            fix, check, infer = timed(path, Path(tmp, "out.onnx"), args.repeat, args.profile if last else None)
            results[n] = (total, fix, check, infer)
            print(f"| {args.weights} | {total} | {total - len(model.graph.node)} | {bodies} | {fix:.2f} | {check:.2f} | {infer:.2f} |",
                  flush=True)
    if len(results) > 1:
        (n0, f0, c0, i0), (n1, f1, c1, i1) = results[args.nodes[0]], results[args.nodes[-1]]
        print(f"\n{n1} vs {n0} nodes (linear: {n1 / n0:.1f}): fix time ratio {f1 / f0:.2f}, check {c1 / c0:.2f}, "
              f"onnx inference alone {i1 / i0:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
