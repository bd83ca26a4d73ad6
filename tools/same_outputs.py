"""Prove a refactoring changed no behaviour: the models graphfix writes are byte-identical.

Runs one graphfix tree (``--tree``, put first on ``PYTHONPATH``) on every ONNX file under
``fixtures/`` with ``--passes all --no-verify`` and with ``--passes auto --trt V`` (verified) for
8.2, 8.5 and 10.1, and records per run the exit code, the error line (paths masked) and the SHA-256
of every file written. Run it on the old and on the new tree, then compare the two manifests::

    python tools/same_outputs.py record --tree /path/to/old --out /tmp/old.json
    python tools/same_outputs.py record --tree .            --out /tmp/new.json
    python tools/same_outputs.py compare /tmp/old.json /tmp/new.json

``compare`` prints every run whose result differs and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS: dict[str, list[str]] = {
    "all-no-verify": ["--passes", "all", "--no-verify"],
    "auto-8.2": ["--passes", "auto", "--trt", "8.2"],
    "auto-8.5": ["--passes", "auto", "--trt", "8.5"],
    "auto-10.1": ["--passes", "auto", "--trt", "10.1"],
}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(tree: Path, model: Path, config: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="same-outputs-") as tmp:
        out = Path(tmp) / "out.onnx"
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        proc = subprocess.run(
            [sys.executable, "-m", "graphfix", str(model), str(out), *CONFIGS[config]],
            capture_output=True, text=True, env=env, cwd=tmp,
        )
        lines = proc.stderr.strip().splitlines()
        error = lines[-1].replace(tmp, "<out>").replace(str(ROOT), "<root>") if proc.returncode else ""
        written = {p.name: _digest(p) for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    return {"exit": proc.returncode, "error": error, "written": written}


def record(tree: Path, out: Path, jobs: int) -> None:
    models = sorted(p for p in (ROOT / "fixtures").rglob("*.onnx"))
    cases = [(m, c) for m in models for c in CONFIGS]
    results: dict[str, object] = {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(_run, tree.resolve(), m, c): f"{m.relative_to(ROOT)} {c}" for m, c in cases}
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if done % 50 == 0:
                print(f"{done}/{len(cases)}", file=sys.stderr)
    out.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    print(f"{len(cases)} runs of {len(models)} models recorded in {out}")


def compare(old: Path, new: Path) -> int:
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    for key in differ:
        print(f"{key}:\n  old {a.get(key)}\n  new {b.get(key)}")
    print(f"{len(a)} runs compared, {len(differ)} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run one tree on every fixture and write a manifest")
    rec.add_argument("--tree", type=Path, required=True)
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--jobs", type=int, default=2)
    cmp_ = sub.add_parser("compare", help="compare two manifests")
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        record(args.tree, args.out, args.jobs)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
