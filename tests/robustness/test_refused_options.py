"""Options are checked before any work, in one line, by the CLI and the API alike: numbers and
tolerances, empty lists, --load-inputs of the wrong type or shape, report extensions, --trt typos;
nothing falls back silently.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from graphfix.errors import GraphfixError
from tests.helpers.cli_runs import ROOT, refused, run, save


@pytest.mark.parametrize("args,expect", [
    (["--iterations", "0"], "--iterations"),
    (["--iterations", "-3"], "--iterations"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**32)], "--seed"),
    (["--input-shapes", "feat:1x4x100000x100000"], "2 GiB"),
    (["--input-shapes", "feat:1x4x400x400", "--iterations", "1000"], "2 GiB"),
    (["--val-range", "feat:[-1e999,1]"], "--val-range"),
])
def test_bad_numbers_are_refused(args, expect, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", *args], capfd, tmp_path, expect)


@pytest.mark.parametrize("value", ["", " , "])
def test_empty_pass_list_is_refused(value, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", "--passes", value], capfd, tmp_path, "--passes")


def test_empty_load_inputs_list_is_refused(src, tmp_path, capfd):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    refused([src, tmp_path / "out.onnx", "--load-inputs", empty], capfd, tmp_path, ("empty.json", "no input"))


@pytest.mark.parametrize("fmt", ["npz", "json"])
def test_load_inputs_with_wrong_dtype_are_refused(fmt, src, tmp_path, capfd):
    feed = np.zeros((1, 4, 3, 3), np.int64)
    if fmt == "npz":
        path = tmp_path / "feeds.npz"
        np.savez(path, feat=feed)
    else:
        from polygraphy.json import save_json

        path = tmp_path / "feeds.json"
        save_json([{"feat": feed}], str(path))
    refused([src, tmp_path / "out.onnx", "--load-inputs", path], capfd, tmp_path, ("'feat'", "int64", "float32"))


def test_load_inputs_with_wrong_static_shape_are_refused(src, tmp_path, capfd):
    path = tmp_path / "feeds.npz"
    np.savez(path, feat=np.zeros((1, 5, 3, 3), np.float32))
    refused([src, tmp_path / "out.onnx", "--load-inputs", path], capfd, tmp_path, ("'feat'", "shape"))


def test_api_refuses_what_the_cli_refuses(src):
    import graphfix

    with pytest.raises(GraphfixError, match="no input"):
        graphfix.fix(src, inputs=[])
    with pytest.raises(GraphfixError, match="int64"):
        graphfix.fix(src, inputs=[{"feat": np.zeros((1, 4, 2, 2), np.int64)}])
    with pytest.raises(GraphfixError, match="passes"):
        graphfix.fix(src, passes="")
    with pytest.raises(GraphfixError, match="iterations"):
        graphfix.fix(src, iterations=0)


@pytest.mark.parametrize("args", [["--atol", "nan"], ["--rtol", "nan"], ["--atol=-1e-3"], ["--rtol=-1"], ["--atol", "inf"]])
def test_bad_tolerances_are_refused(args, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", *args], capfd, tmp_path, args[0].split("=")[0])


@pytest.mark.parametrize("kw", [{"atol": math.nan}, {"rtol": -1.0}, {"seed": -1}])
def test_api_refuses_bad_numbers(kw, src):
    import graphfix

    with pytest.raises(GraphfixError):
        graphfix.fix(src, **kw)


def test_api_loads_inputs_from_a_regular_file_only(src, tmp_path):
    import graphfix

    path = tmp_path / "feeds.npz"
    np.savez(path, feat=np.ones((1, 4, 3, 3), np.float32))
    assert graphfix.fix(src, inputs=path).outcome.feeds[0]["feat"].shape == (1, 4, 3, 3)
    with pytest.raises(GraphfixError, match="not a regular file"):
        graphfix.fix(src, inputs="/dev/zero")


@pytest.mark.parametrize("name,got", [("r.txt", "'.txt'"), ("report", "no extension"), ("r.JSON", "'.JSON'")])
def test_unknown_report_extension_is_refused(name, got, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / name], capfd, tmp_path,
            (name, got, ".json (JSON, plus polygraphy inputs/outputs files), .md (Markdown)"))


@pytest.mark.parametrize("command", ["fix", "check"])
def test_trt_version_typo_is_refused_with_the_known_releases(command, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    args = [src, tmp_path / "out.onnx"] if command == "fix" else ["check", src]
    refused([*args, "--trt", "86"], capfd, tmp_path, ("--trt 86", "no such TensorRT release", "8.6, 9.0", "11.1"))
    rc, _, err = run(["check", src, "--trt", "12.0"], capfd)  # the next major is a plausible release
    assert rc in (0, 1) and not err, err
