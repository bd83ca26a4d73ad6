"""Every Mermaid diagram graphfix writes parses with mermaid's own parser (npm ``mermaid`` under
node), the one GitHub, GitLab and the HTML report render with: a string comparison cannot tell
whether mermaid accepts a label, and one bad label blanks the whole diagram.

The node project is ``tests/mermaid`` (package.json, lockfile, parse.mjs). ``npm ci`` installs it
once into a cache directory named after the hash of those files, so the README's test command
(which ``.ci/run`` runs) needs nothing else, and a changed lockfile gets a fresh install.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from graphfix.cli import main
from graphfix.regions import mermaid_node

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "mermaid"
FILES = ("package.json", "package-lock.json", "parse.mjs")

#: The demo and fixtures whose rewrites cover ops, constants, subgraphs and multi-node regions.
FIXTURES = [
    "demo/superglue_matcher.onnx",
    "gridsample_decompose/superpoint_sample_descriptors.onnx",
    "if_inline/legacy_rank_test.onnx",
    "layernorm_decompose/bert_self_output.onnx",
    "pad_to_concat/circular_pad.onnx",
]

MermaidParse = Callable[[list[str]], list[str | None]]


def _install() -> Path:
    """tests/mermaid installed with ``npm ci`` into the user cache (built aside, then renamed in,
    so concurrent or interrupted runs never see half an install)."""
    digest = hashlib.sha256(b"".join((PROJECT / f).read_bytes() for f in FILES)).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphfix"
    target = cache / f"mermaid-{digest}"
    if (target / "node_modules").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="mermaid-", dir=cache))
    for f in FILES:
        shutil.copy(PROJECT / f, build / f)
    proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(build)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode:
        shutil.rmtree(build, ignore_errors=True)
        pytest.fail(f"npm ci for tests/mermaid failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    try:
        build.rename(target)
    except OSError:  # another run got there first
        shutil.rmtree(build, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def mermaid_parse() -> MermaidParse:
    """Parse diagrams with mermaid; per diagram None (accepted) or mermaid's error message."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (Debian: apt-get install nodejs npm); the diagrams are checked by mermaid under node")
    project = _install()

    def parse(diagrams: list[str]) -> list[str | None]:
        proc = subprocess.run(["node", str(project / "parse.mjs")], input=json.dumps(diagrams),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    return parse


def _written_diagrams(fixture: str, tmp: Path) -> list[str]:
    """The diagrams of one run: those in the Markdown report and those in the JSON report."""
    assert main([str(ROOT / "fixtures" / fixture), str(tmp / "fixed.onnx"), "--passes", "all",
                 "--report", str(tmp / "r.json"), "--report", str(tmp / "r.md"), "--quiet"]) == 0
    in_json = [n["diagram"] for n in json.loads((tmp / "r.json").read_text())["nodes"] if n.get("diagram")]
    in_markdown = re.findall(r"^```mermaid\n(.*?)^```$", (tmp / "r.md").read_text(), re.M | re.S)
    assert in_json and in_markdown, f"{fixture}: no diagram written"
    return in_json + [d.rstrip("\n") for d in in_markdown]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_report_diagrams_parse(fixture, mermaid_parse, tmp_path):
    diagrams = _written_diagrams(fixture, tmp_path)
    errors = {d: e for d, e in zip(diagrams, mermaid_parse(diagrams), strict=True) if e}
    assert not errors, "\n\n".join(f"{d}\n--> {e}" for d, e in errors.items())


def test_labels_with_any_characters_parse(mermaid_parse):
    """Tensor and node names are free text: quotes, brackets, entities, HTML, a Markdown backtick,
    mermaid keywords."""
    names = ['a"b', "x[0]:(1)", "#quot; & #35;", "<unk>", "`md`", "end", "a --> b", 'say "end"', "{}|;%%"]
    diagrams = ["flowchart LR\n  " + mermaid_node("n", name, shape) for name in names for shape in ("op", "tensor", "constant")]
    assert mermaid_parse(diagrams) == [None] * len(diagrams)
    # the parser is not lenient: the unescaped form of a quote is refused
    assert mermaid_parse(['flowchart LR\n  n(["a"b"])'])[0]
