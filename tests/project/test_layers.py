"""The layer picture of docs/architecture.md stays true: lint-imports keeps the contracts, and
every module of the package sits in a layer (a new one cannot slip past the contract)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_module_of_the_package_sits_in_a_layer():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    children = {p.stem if p.is_file() else p.name for p in (ROOT / "graphfix").iterdir()
                if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name not in ("__init__.py", "__main__.py")}
    assert children - named == set(), "add these to a layer in pyproject.toml and docs/architecture.md"
    assert named - children == set(), "layers name modules that do not exist"


def test_layers_are_drawn_in_the_architecture_doc_in_the_same_order():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    picture = doc.split("```")[1]
    positions = [picture.find("\n" + layer.split("|")[0].strip()) for layer in layers]
    assert -1 not in positions and positions == sorted(positions)


def test_imports_go_downward_only_and_without_circles():
    lint = Path(sys.executable).with_name("lint-imports")  # import-linter, a test dependency
    run = subprocess.run([str(lint if lint.exists() else shutil.which("lint-imports"))], check=False, cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "2 kept, 0 broken" in run.stdout
