"""Written files get the mode the user's umask gives a new file; an overwritten file keeps its mode.
"""

from __future__ import annotations

import os
import stat

import pytest

from tests.helpers.cli_runs import run


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_get_the_umask_mode(umask, src, tmp_path, capfd):
    old = os.umask(umask)
    try:
        rc, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--report", tmp_path / "r.md", "--quiet"], capfd)
    finally:
        os.umask(old)
    assert rc == 0, err
    for name in ("out.onnx", "r.json", "r.md", "r.inputs.json", "r.outputs.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_overwriting_keeps_the_existing_mode(src, tmp_path, capfd):
    dst = tmp_path / "out.onnx"
    dst.write_bytes(b"old")
    dst.chmod(0o640)
    rc, _, err = run([src, dst, "--quiet"], capfd)
    assert rc == 0, err
    assert stat.S_IMODE(dst.stat().st_mode) == 0o640 and dst.read_bytes() != b"old"
