"""Issue-8 scale targets as ratios: graphfix --no-verify vs onnx.load + onnx.save on a big export.

Builds a MatMul -> computed-bound Clip chain (the pattern fold-clip rewrites; Constant->Cast
bounds as exports without constant folding write them), ``blocks`` blocks of 4 nodes with a
``dim x dim`` fp32 weight each, and measures wall time and peak RSS of each tool in its own
process (the ``graphfix`` command as users run it, ``--passes all --no-verify``; each measured
under its own parent, which reports its one child's CPU time and peak; best of two runs).

    python bench/scale.py --blocks 2500 25000 --dim 64      # 10k and 100k nodes, ~41 / 410 MB

``--baseline-rev REV`` (one or more git revisions) compares this tree's graphfix with each
revision's, in the same run: each revision's ``graphfix/`` is extracted (``git archive``) into a
temporary folder, and every tree runs as ``python -m graphfix`` with ``PYTHONPATH`` at it, from
outside all of them; the runs are interleaved (load+save, this tree, each revision, then again)
so that other jobs on the machine slow each about alike, best of ``--repeat``:

    python bench/scale.py --blocks 25000 --baseline-rev 963afce^1   # before control flow was merged
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
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


#: The command under its own parent, a child subreaper (PR_SET_CHILD_SUBREAPER): graphfix's worker
#: process, orphaned when graphfix exits, is reaped there too, so RUSAGE_CHILDREN holds both
#: processes' CPU time and the larger peak (RUSAGE_CHILDREN is a maximum over every child a
#: process ever waited for, so a shared parent would mix the tools' peaks).
_REPORTER = ("import ctypes, os, resource, subprocess, sys; ctypes.CDLL(None).prctl(36, 1); "
             "subprocess.run(sys.argv[1:], check=True)\n"
             "while True:\n    try: os.wait()\n    except ChildProcessError: break\n"
             "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print('PEAK', r.ru_maxrss, r.ru_utime + r.ru_stime, file=sys.stderr)")


def once(argv: list[str], tree: Path | None = None, cwd: Path = ROOT) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run of ``argv`` under its own parent;
    ``tree``: the checkout whose graphfix it imports (``PYTHONPATH``). CPU time (user + system of
    the command and its children: graphfix and its worker process, which takes a big graph's
    checks) is the fair figure on a shared machine: other jobs stretch the wall time of whichever
    run they overlap."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree is not None else None
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _REPORTER, *argv], cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    rss, seconds = proc.stderr.split("PEAK")[-1].split()[:2]
    return wall, float(seconds), float(rss) / 1024


def run(argv: list[str], repeat: int = 2) -> tuple[float, float, float]:
    """(best wall seconds, best CPU seconds, peak RSS in MB) of ``repeat`` runs of ``argv``."""
    runs = [once(argv) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def graphfix(*args: str) -> list[str]:
    """The installed ``graphfix`` command: what users run, process exit included."""
    return [str(Path(sys.executable).with_name("graphfix")), *args]


def checkout(rev: str, into: Path) -> Path:
    """``rev``'s ``graphfix/`` package, extracted into ``into`` and byte-compiled (as installed)."""
    archive = subprocess.run(["git", "archive", rev, "graphfix"], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "graphfix")], check=True, capture_output=True)
    return into


def against_revisions(args: argparse.Namespace, folder: Path) -> None:
    """This tree's ``python -m graphfix`` against each ``--baseline-rev``'s, interleaved, best of
    ``--repeat`` (wall and CPU), with the ratios (this tree / revision)."""
    revs = {rev: checkout(rev, folder / f"rev{k}") for k, rev in enumerate(args.baseline_rev)}
    trees = {"this tree": ROOT, **revs}
    print("| nodes | load+save s (CPU) | " + " | ".join(f"{name} s (CPU)" for name in trees) + " | "
          + " | ".join(f"time / CPU ratio vs {rev}" for rev in revs) + " | "
          + " | ".join(f"{name} peak MB" for name in trees) + " |")
    print("|---:|---:|" + "---:|" * (2 * len(trees) + len(revs)))
    for blocks in args.blocks:
        src, dst = folder / "in.onnx", folder / "out.onnx"
        once(python(f"import sys; sys.path.insert(0, 'bench'); import onnx, scale; onnx.save(scale.chain({blocks}, {args.dim}), {str(src)!r})"))
        fix = [sys.executable, "-m", "graphfix", str(src), str(dst), "--passes", "all", "--no-verify", "--quiet"]
        runs: dict[str, list[tuple[float, float, float]]] = {"load+save": [], **{name: [] for name in trees}}
        for _ in range(args.repeat):
            runs["load+save"].append(once(python(f"import onnx; m = onnx.load({str(src)!r}); onnx.save(m, {str(dst)!r})")))
            for name, tree in trees.items():  # from the temporary folder: no tree shadows PYTHONPATH's
                runs[name].append(once(fix, tree, cwd=folder))
        best = {name: (min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs)) for name, rs in runs.items()}
        here = best["this tree"]
        cells = [f"{best[name][0]:.2f} ({best[name][1]:.2f})" for name in ["load+save", *trees]]
        cells += [f"{here[0] / best[rev][0]:.3f} / {here[1] / best[rev][1]:.3f}" for rev in revs]
        cells += [f"{best[name][2]:.0f}" for name in trees]
        print(f"| {4 * blocks} | " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, nargs="+", default=[2500, 25000])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each tool (best of them)")
    ap.add_argument("--baseline-rev", nargs="+", default=[], metavar="REV",
                    help="git revisions whose graphfix to time against this tree's, in the same run")
    args = ap.parse_args(argv)
    # byte-compiled as an installed graphfix is (pip compiles at install): with PYTHONDONTWRITEBYTECODE
    # set, an editable checkout would recompile its ~130 modules on every run (0.15 s)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "graphfix")], check=True, capture_output=True)
    if args.baseline_rev:
        with tempfile.TemporaryDirectory() as d:
            against_revisions(args, Path(d))
        return 0
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
