"""load_model parses a protobuf file from a memory map of it: the same model as onnx.load, the
same refusals for files protobuf cannot read."""

from __future__ import annotations

import onnx
import pytest

import graphfix
from graphfix.errors import GraphfixError
from graphfix.onnxio import parse as parse_mod
from graphfix.onnxio.dims import clear
from graphfix.onnxio.load import load_model
from graphfix.onnxio.paths import read_plan
from tests.helpers.cli_runs import ROOT, external_model

FIXTURES = sorted((ROOT / "fixtures").rglob("*.onnx"))[::7]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_mapped_parse_is_onnx_load(path):
    """Byte for byte onnx.load's model, but for the declared dims below 1 the load clears (issue 31)."""
    expected = onnx.load(str(path), load_external_data=False)
    clear(expected)
    assert load_model(path).SerializeToString() == expected.SerializeToString()


@pytest.mark.parametrize("data,says", [(b"", "no graph, no outputs"), (b"\x0a\xff\xff", "not a readable ONNX model")])
def test_empty_and_cut_files_are_refused(data, says, tmp_path):
    path = tmp_path / "in.onnx"
    path.write_bytes(data)
    with pytest.raises(GraphfixError, match=says):
        load_model(path)


def test_cut_model_is_refused(tmp_path):
    data = (ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx").read_bytes()
    path = tmp_path / "in.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphfixError, match="not a readable ONNX model"):
        load_model(path)


def _counting(monkeypatch) -> list:
    calls = []
    real = parse_mod.parse
    monkeypatch.setattr(parse_mod, "parse", lambda p: (calls.append(p), real(p))[1])
    return calls


@pytest.mark.parametrize("external", [False, True])
def test_planned_run_parses_the_file_once(external, tmp_path, monkeypatch):
    """A model with external data is parsed to plan the run and not again to load it."""
    src = external_model(tmp_path / "m") if external else tmp_path / "in.onnx"
    if not external:
        src.write_bytes((ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx").read_bytes())
    calls = _counting(monkeypatch)
    graphfix.fix(str(src), output=str(tmp_path / "out.onnx"), verify=False)
    assert calls == [src]


def test_file_changed_after_planning_is_parsed_again(tmp_path, monkeypatch):
    src = external_model(tmp_path / "m")
    calls = _counting(monkeypatch)
    read_plan(src)
    changed = onnx.load(str(src), load_external_data=False)
    changed.producer_name = "changed after planning"
    src.write_bytes(changed.SerializeToString())
    assert load_model(src).producer_name == "changed after planning"
    assert len(calls) == 2
