"""The fixture the robustness tests share: a copy of a fold-clip fixture to run on."""

from pathlib import Path

import pytest

from tests.helpers.cli_runs import FIXTURE


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "in.onnx"
    p.write_bytes(FIXTURE.read_bytes())
    return p

