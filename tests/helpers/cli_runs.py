"""Run the command line in-process and check a refusal: exit 2, one stderr line, the folder unchanged
(every file's digest and mode); small models for those runs."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under root (hidden temp files included): content digest and mode."""
    snap = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            snap[str(p.relative_to(root))] = ("link:" + os.readlink(p), 0)
        elif p.is_file():
            st = p.stat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if st.st_size < 2**26 else f"{st.st_size}@{st.st_mtime_ns}"
            snap[str(p.relative_to(root))] = (digest, stat.S_IMODE(st.st_mode))
    return snap


#: What a run prints on a non-terminal stderr as each phase ends (graphfix.cli.fix._Progress).
PHASE_LINE = re.compile(r"^graphfix: .* \.\.\. \d+\.\ds$")


def run(args: list[str], capfd) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    captured = capfd.readouterr()
    return rc, captured.out, captured.err


def refused(args: list[str], capfd, root: Path, expect: str | tuple[str, ...]) -> str:
    """Exit 2, one stderr line containing every expected fragment, folder unchanged."""
    before = snapshot(root)
    rc, _, err = run(args, capfd)
    lines = [line for line in err.strip().splitlines() if not PHASE_LINE.match(line)]  # the phases it went through
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("graphfix: error: "), err
    for e in (expect,) if isinstance(expect, str) else expect:
        assert e in lines[0], lines[0]
    assert snapshot(root) == before
    return lines[0]


def save(m: onnx.ModelProto, p: Path) -> Path:
    p.write_bytes(m.SerializeToString())
    return p


def relu_model(elem_type: int = FLOAT, shape=(2, 3), opset: int = 17) -> onnx.ModelProto:
    return model([node("Identity", ["x"], ["y"])], [inp("x", elem_type, list(shape))], [out("y", elem_type, list(shape))], opset=opset)


def external_model(folder: Path, location: str = "in.data", name: str = "in.onnx") -> Path:
    """A MatMul whose weights live in an external data file (what torch writes for big models)."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [2, 64])], [out("y", FLOAT, [2, 64])], [w])
    onnx.save_model(m, str(folder / name), save_as_external_data=True, location="tmp.data", size_threshold=0)
    set_location(folder / name, location)
    target = Path(location) if os.path.isabs(location) else folder / location
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder / "tmp.data", target)
    return folder / name


def set_location(path: Path, location: str, **extra: str) -> None:
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
            elif e.key in extra:
                e.value = extra[e.key]
    path.write_bytes(m.SerializeToString())
