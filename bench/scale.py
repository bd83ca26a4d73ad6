"""Issue-8 scale targets as ratios: graphfix --no-verify vs onnx.load + onnx.save on a big export.

Builds a MatMul -> computed-bound Clip chain (the pattern fold-clip rewrites; Constant->Cast
bounds as exports without constant folding write them), ``blocks`` blocks of 4 nodes with a
``dim x dim`` fp32 weight each, and measures wall time and peak RSS of each tool in its own
process (the ``graphfix`` command as users run it, ``--passes all --no-verify``; each measured
under its own parent, which reports its one child's CPU time and peak; best of two runs).

    python bench/scale.py --blocks 2500 25000 --dim 64      # 10k and 100k nodes, ~41 / 410 MB
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def chain(blocks: int, dim: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for k in range(blocks):
        w = f"w{k}"
        inits.append(numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w))
        nodes += [
            helper.make_node("MatMul", [x, w], [f"m{k}"], name=f"/b{k}/MatMul"),
            helper.make_node("Constant", [], [f"lo{k}"], name=f"/b{k}/lo", value=numpy_helper.from_array(np.array(-1.0, np.float64))),
            helper.make_node("Cast", [f"lo{k}"], [f"lof{k}"], name=f"/b{k}/Cast", to=TensorProto.FLOAT),
            helper.make_node("Clip", [f"m{k}", f"lof{k}"], [f"y{k}"], name=f"/b{k}/Clip"),
        ]
        x = f"y{k}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def run(argv: list[str], repeat: int = 2) -> tuple[float, float, float]:
    """(best wall seconds, best CPU seconds, peak RSS in MB) of the command ``argv``, each run
    under its own parent process that reports its children's CPU time (user + system: graphfix
    and its worker process, which takes a big graph's checks) and their peak
    (RUSAGE_CHILDREN is a maximum over every child a process ever waited for, so a shared parent
    would mix the tools' peaks). CPU time is the fair figure on a shared machine: other jobs
    stretch the wall time of whichever tool they overlap."""
    # the reporter is a subreaper (PR_SET_CHILD_SUBREAPER): graphfix's worker process, orphaned when
    # graphfix exits, is reaped by it, so its CPU time counts too
    reporter = ("import ctypes, os, resource, subprocess, sys; ctypes.CDLL(None).prctl(36, 1); "
                "subprocess.run(sys.argv[1:], check=True)\n"
                "while True:\n    try: os.wait()\n    except ChildProcessError: break\n"
                "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
                "print('PEAK', r.ru_maxrss, r.ru_utime + r.ru_stime, file=sys.stderr)")
    best, cpu, peak = float("inf"), float("inf"), 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", reporter, *argv], cwd=ROOT, capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        rss, seconds = proc.stderr.split("PEAK")[-1].split()[:2]
        peak, cpu = max(peak, float(rss) / 1024), min(cpu, float(seconds))
    return best, cpu, peak


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def graphfix(*args: str) -> list[str]:
    """The installed ``graphfix`` command: what users run, process exit included."""
    return [str(Path(sys.executable).with_name("graphfix")), *args]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, nargs="+", default=[2500, 25000])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each tool (best of them)")
    args = ap.parse_args(argv)
    # byte-compiled as an installed graphfix is (pip compiles at install): with PYTHONDONTWRITEBYTECODE
    # set, an editable checkout would recompile its ~130 modules on every run (0.15 s)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "graphfix")], check=True, capture_output=True)
    print("| nodes | MB | load+save s (CPU) | graphfix s (CPU) | time ratio | CPU ratio | load+save peak MB | graphfix peak MB | memory ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    times = {}
    with tempfile.TemporaryDirectory() as d:
        for blocks in args.blocks:
            src, dst = Path(d, "in.onnx"), Path(d, "out.onnx")
            # built in a child: a fork inherits this process's peak RSS, which would skew the others
            run(python(f"import sys; sys.path.insert(0, 'bench'); import onnx, scale; onnx.save(scale.chain({blocks}, {args.dim}), {str(src)!r})"), 1)
            mb = src.stat().st_size / 2**20
            # each measurement in a fresh child so peaks do not mix (RUSAGE_CHILDREN is a max over children)
            t_ls, c_ls, p_ls = run(python(f"import onnx; m = onnx.load({str(src)!r}); onnx.save(m, {str(dst)!r})"), args.repeat)
            t_gf, c_gf, p_gf = run(graphfix(str(src), str(dst), "--passes", "all", "--no-verify", "--quiet"), args.repeat)
            times[blocks] = t_gf
            print(f"| {4 * blocks} | {mb:.0f} | {t_ls:.2f} ({c_ls:.2f}) | {t_gf:.2f} ({c_gf:.2f}) | {t_gf / t_ls:.2f}x | "
                  f"{c_gf / c_ls:.2f}x | {p_ls:.0f} | {p_gf:.0f} | {p_gf / p_ls:.2f}x |", flush=True)
    if len(args.blocks) >= 2:
        a, b = sorted(args.blocks)[0], sorted(args.blocks)[-1]
        print(f"\n{4 * b} vs {4 * a} nodes: time ratio {times[b] / times[a]:.1f} (linear would be {b / a:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
