"""The TensorRT support data: loads, covers every release, resolves versions, stays ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphfix.errors import GraphfixError
from graphfix.trt import support

SHARED = Path(__file__).resolve().parents[3] / "shared" / "trt" / "parser_support.json"


def test_data_loads_and_names_its_source():
    assert "onnx-tensorrt" in support.data()["source"]
    assert len(support.errors()) == 61


@pytest.mark.skipif(not SHARED.exists(), reason="the research corpus is beside the repository only on developer machines")
def test_every_corpus_release_is_covered():
    corpus = json.loads(SHARED.read_text())
    assert support.versions() == corpus["version_order"]
    for op, per_version in corpus["ops"].items():
        for version, entry in per_version.items():
            got = support.op_support(op, support.resolve(version))
            assert got is not None, (op, version)
            assert got.supported == entry.get("importer_in_source", entry["supported"]), (op, version)


@pytest.mark.parametrize("version", ["5.1", "7.0", "7.2", "8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "9.3", "10.0", "10.1", "10.8", "11.1"])
def test_documented_releases_resolve_to_themselves(version):
    release = support.resolve(version)
    assert release.key == version and release.note == ""
    assert support.opset_range(release)[1] >= 9


@pytest.mark.parametrize("asked,used", [("8.6.1", "8.6"), ("10.3", "10.1"), ("10.9", "10.8"), ("9.9", "9.3"), ("12.0", "11.1")])
def test_unlisted_versions_use_nearest_documented_below(asked, used):
    release = support.resolve(asked)
    assert release.key == used and asked in release.note and used in release.note


def test_changelog_note_for_undocumented_release():
    assert "Slice accepts a runtime" in support.resolve("10.3").note


@pytest.mark.parametrize("bad", ["eight", "4.0", ""])
def test_bad_versions_are_clear_errors(bad):
    with pytest.raises(GraphfixError):
        support.resolve(bad)


def test_op_history_facts():
    at = support.resolve
    assert not support.op_support("LayerNormalization", at("8.5")).supported
    assert support.op_support("LayerNormalization", at("8.6")).supported
    assert support.op_support("Einsum", at("8.2")).supported and not support.op_support("Einsum", at("8.0")).supported
    assert support.op_support("Gelu", at("9.3")) is None or not support.op_support("Gelu", at("9.3")).supported
    assert not support.op_support("Col2Im", at("11.1")).supported
