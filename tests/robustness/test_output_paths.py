"""What graphfix writes never lands on what it reads or on each other (under any spelling of the
path, external data and report side files included), nor on a FIFO, a device or a symlink loop;
every file name the filesystem allows is written, longer ones are refused before any work.

Every refusal checks exit 2, exactly one line on stderr (captured at the file-descriptor level),
and the folder byte-for-byte as it was (tests.helpers.cli_runs.refused).
"""

from __future__ import annotations

import os
import stat

import onnx
import pytest

from graphfix.cli.main import main
from graphfix.errors import GraphfixError
from tests.helpers.cli_runs import FIXTURE, ROOT, external_model, refused, run, save, snapshot


@pytest.mark.parametrize("which", ["input", "output"])
def test_report_onto_input_or_output_is_refused(which, src, tmp_path, capfd):
    dst = tmp_path / "out.onnx"
    if which == "output":
        dst.write_bytes(b"previous result")
    target = src if which == "input" else dst
    refused([src, dst, "--report", target], capfd, tmp_path, ("--report", which))


def test_report_onto_an_input_named_md_is_refused(tmp_path, capfd):
    src = tmp_path / "in.md"
    src.write_bytes(FIXTURE.read_bytes())
    refused([src, tmp_path / "out.onnx", "--report", src], capfd, tmp_path, "never overwrites its input")


@pytest.mark.parametrize("spelling", ["dot", "dotdot", "symlink", "hardlink"])
def test_collisions_through_other_spellings_are_refused(spelling, src, tmp_path, capfd, monkeypatch):
    (tmp_path / "sub").mkdir()
    if spelling == "dot":
        monkeypatch.chdir(tmp_path)
        same = "./in.onnx"
    elif spelling == "dotdot":
        same = str(tmp_path / "sub" / ".." / "in.onnx")
    elif spelling == "symlink":
        same = tmp_path / "sub" / "link.onnx"
        same.symlink_to(src)
    else:
        same = tmp_path / "sub" / "hard.onnx"
        os.link(src, same)
    refused([src, tmp_path / "out.onnx", "--report", same], capfd, tmp_path, "never overwrites its input")
    refused([src, same], capfd, tmp_path, "never overwrites its input")


@pytest.mark.parametrize("reports,expect", [
    (["r.json", "r.json"], "r.json"),
    (["r.json", "./r.json"], "r.json"),
    (["r.json", "r.inputs.json"], "r.inputs.json"),
    (["a.md", "out.onnx"], "out.onnx"),
])
def test_outputs_colliding_with_each_other_are_refused(reports, expect, src, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [src, "out.onnx"]
    for r in reports:
        args += ["--report", r]
    refused(args, capfd, tmp_path, expect)


def test_report_side_file_onto_load_inputs_is_refused(src, tmp_path, capfd):
    assert main([str(src), str(tmp_path / "a.onnx"), "--report", str(tmp_path / "r.json"), "--quiet"]) == 0
    capfd.readouterr()
    refused([src, tmp_path / "b.onnx", "--load-inputs", tmp_path / "r.inputs.json", "--report", tmp_path / "r.json"],
            capfd, tmp_path, "r.inputs.json")


def test_output_onto_the_inputs_weights_is_refused(tmp_path, capfd):
    src = external_model(tmp_path)
    line = refused([src, tmp_path / "in.data"], capfd, tmp_path, ("in.data", "external data"))
    assert "never overwrites" in line


def test_report_onto_the_inputs_weights_is_refused(tmp_path, capfd):
    src = external_model(tmp_path)
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / "in.data"], capfd, tmp_path, ("in.data", "external data"))


def test_default_external_data_output_onto_the_inputs_weights_is_refused(tmp_path, capfd):
    """`out.onnx` may get its weights in `out.onnx.data`: that name must not be the input's weights."""
    src = external_model(tmp_path, location="out.onnx.data")
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "out.onnx.data")


def test_external_data_option_collisions_are_refused(tmp_path):
    from graphfix.onnxio.paths import plan_fix

    src = external_model(tmp_path)
    with pytest.raises(GraphfixError, match="never overwrites its input"):
        plan_fix(src, tmp_path / "out.onnx", external_data="in.data")
    with pytest.raises(GraphfixError, match="outside the output's folder"):
        plan_fix(src, tmp_path / "out.onnx", external_data="../w.data")
    with pytest.raises(GraphfixError, match="report"):
        plan_fix(src, tmp_path / "out.onnx", reports=[tmp_path / "w.data"], external_data="w.data")
    plan = plan_fix(src, tmp_path / "out.onnx", external_data="w.data")
    assert tmp_path / "w.data" in plan.write_paths() and tmp_path / "in.data" in plan.read_paths()


def test_external_data_model_still_fixes(tmp_path, capfd):
    src = external_model(tmp_path)
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet"], capfd)
    assert rc == 0, err


def test_api_save_and_save_report_never_overwrite_what_was_read(tmp_path):
    import graphfix

    src = external_model(tmp_path)
    result = graphfix.fix(src, output=tmp_path / "out.onnx")
    before = snapshot(tmp_path)
    for target in (src, tmp_path / "in.data", tmp_path / "./in.onnx"):
        with pytest.raises(GraphfixError, match="never overwrites its input"):
            result.save(target)
        with pytest.raises(GraphfixError, match="never overwrites its input"):
            result.save_report(target)
    with pytest.raises(GraphfixError, match="output"):
        result.save_report(tmp_path / "out.onnx")
    with pytest.raises(GraphfixError, match="is a directory"):
        graphfix.fix(src, output=tmp_path)
    assert snapshot(tmp_path) == before
    result.save_report(tmp_path / "r.json")
    # nothing was rewritten: no session ran, so there are no results for polygraphy side files
    assert result.report.sessions == 0 and {p.name for p in tmp_path.iterdir()} - set(before) == {"r.json"}


def _name(n: int, suffix: str = ".onnx") -> str:
    return "o" * (n - len(suffix)) + suffix


@pytest.mark.parametrize("n", [250, 251, 255])
def test_every_legal_output_name_is_written(n, tmp_path, capfd):
    """The temp, backup and lock names beside a long target are shortened (with a hash)."""
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / _name(n), "--quiet"], capfd)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.onnx", _name(n)])


def test_names_too_long_are_refused_before_any_work(tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    refused([src, tmp_path / _name(256)], capfd, tmp_path, ("output file name is 256 bytes", "at most 255"))
    report = tmp_path / _name(250, ".json")  # its side file <stem>.inputs.json is 257 bytes
    refused([src, tmp_path / "out.onnx", "--report", report], capfd, tmp_path, (".inputs.json", "257 bytes"))


def test_external_data_onto_a_fifo_or_device_is_refused(tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    os.mkfifo(tmp_path / "w.fifo")
    (tmp_path / "w.dev").symlink_to("/dev/null")
    refused([src, tmp_path / "out.onnx", "--external-data", "w.fifo"], capfd, tmp_path, ("w.fifo", "not a regular file (a FIFO)"))
    refused([src, tmp_path / "out.onnx", "--external-data", "w.dev"], capfd, tmp_path, ("w.dev", "a character device"))
    assert stat.S_ISFIFO(os.stat(tmp_path / "w.fifo").st_mode) and os.readlink(tmp_path / "w.dev") == "/dev/null"


def test_the_writer_itself_never_replaces_a_fifo(tmp_path):
    from graphfix.errors import GraphfixError
    from graphfix.fs.transaction import write_atomic

    os.mkfifo(tmp_path / "w.data")
    with pytest.raises(GraphfixError, match="not a regular file"):
        write_atomic(tmp_path / "w.data", b"x")
    assert stat.S_ISFIFO(os.stat(tmp_path / "w.data").st_mode) and sorted(os.listdir(tmp_path)) == ["w.data"]


@pytest.mark.parametrize("flag", [None, "--report"])
def test_symlink_loop_as_output_is_refused(flag, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    (tmp_path / "o1.json").symlink_to(tmp_path / "o2.json")
    (tmp_path / "o2.json").symlink_to(tmp_path / "o1.json")
    args = [src, tmp_path / "o1.json"] if flag is None else [src, tmp_path / "out.onnx", flag, tmp_path / "o1.json"]
    refused(args, capfd, tmp_path, ("o1.json", "symlink loop"))
    assert os.readlink(tmp_path / "o1.json") == str(tmp_path / "o2.json")
