"""The code base stays ruff-clean (configuration in pyproject.toml)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the [test] extra")
def test_ruff_clean():
    proc = subprocess.run(["ruff", "check", "--no-cache", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
