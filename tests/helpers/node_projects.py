"""The small node projects some tests run (``tests/report/mermaid``: mermaid's parser; ``tests/report/markdown``:
the marked renderer), each installed once with ``npm ci`` into a cache directory named after the
hash of its files, so the README's test command needs nothing else and a changed lockfile gets a
fresh install."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def installed(name: str, files: tuple[str, ...]) -> Path:
    """``tests/report/<name>`` installed with ``npm ci`` into the user cache (built aside, then renamed
    in, so concurrent or interrupted runs never see half an install); skips without node."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"node/npm not installed (Debian: apt-get install nodejs npm); tests/report/{name} runs under node")
    project = ROOT / "tests" / "report" / name
    digest = hashlib.sha256(b"".join((project / f).read_bytes() for f in files)).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphfix"
    target = cache / f"{name}-{digest}"
    if (target / "node_modules").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache))
    for f in files:
        shutil.copy(project / f, build / f)
    proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(build)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode:
        shutil.rmtree(build, ignore_errors=True)
        pytest.fail(f"npm ci for tests/report/{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    try:
        build.rename(target)
    except OSError:  # another run got there first
        shutil.rmtree(build, ignore_errors=True)
    return target


def run_json(script: Path, payload: Any) -> Any:
    """``node script`` with ``payload`` as JSON on stdin; its JSON answer."""
    proc = subprocess.run(["node", str(script)], input=json.dumps(payload), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
