"""Models with external data: weights stay external, are written beside the output, never copied
into the model; over 2 GiB (slow test) read, fixed and written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphfix.cli.main import main
from tests.helpers.models import weight_chain


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def external_model(tmp_path: Path) -> Path:
    src = tmp_path / "in" / "model.onnx"
    src.parent.mkdir()
    onnx.save(weight_chain(3, 512), str(src), save_as_external_data=True, location="weights.bin", size_threshold=1024)
    return src


def test_weights_stay_external_and_are_written_beside_the_output(external_model: Path, tmp_path: Path):
    before = _digests(external_model.parent)
    out = tmp_path / "out.onnx"
    assert main([str(external_model), str(out), "--passes", "fold-clip", "--quiet"]) == 0
    assert _digests(external_model.parent) == before  # the input and its weights untouched
    data = tmp_path / "out.onnx.data"
    assert data.exists() and out.stat().st_size < 64 * 1024  # the model file holds no weights
    assert data.stat().st_size >= 3 * 512 * 512 * 4
    written = onnx.load(str(out), load_external_data=False)
    assert {e.value for t in written.graph.initializer for e in t.external_data if e.key == "location"} == {"out.onnx.data"}
    assert not any(n.op_type == "Cast" for n in written.graph.node)  # fold-clip did rewrite
    x = np.random.default_rng(1).standard_normal((1, 512)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(external_model, x), rtol=1e-6, atol=1e-6)


def test_verification_reads_the_weights_where_they_are(external_model: Path, tmp_path: Path):
    import graphfix

    result = graphfix.fix(str(external_model), "fold-clip", output=tmp_path / "o.onnx")
    assert result.report.passes[0].verdict == "kept" and result.report.sessions == 4
    assert (tmp_path / "o.onnx.data").exists()


def test_external_data_name_and_small_models_stay_one_file(tmp_path: Path):
    src = tmp_path / "small.onnx"
    onnx.save(weight_chain(1, 64), str(src))
    assert main([str(src), str(tmp_path / "one.onnx"), "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.onnx", "small.onnx"]
    assert main([str(src), str(tmp_path / "three.onnx"), "--external-data", "three.bin", "--quiet"]) == 0
    written = onnx.load(str(tmp_path / "three.onnx"), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)
    x = np.ones((1, 64), np.float32)
    np.testing.assert_allclose(_run(tmp_path / "three.onnx", x), _run(src, x), rtol=1e-6)


def test_a_run_that_fails_leaves_no_data_file(external_model: Path, tmp_path: Path):
    out = tmp_path / "out.onnx"
    assert main([str(external_model), str(out), "--atol", "nan", "--quiet"]) == 2
    assert not out.exists() and not (tmp_path / "out.onnx.data").exists()


@pytest.mark.slow
def test_model_over_2_gib_is_read_fixed_written_and_runs(tmp_path: Path):
    """4 x 604 MB weights: more than one protobuf message can hold (slow: 2.4 GB on disk, twice)."""
    src = tmp_path / "big.onnx"
    onnx.save(weight_chain(4, 12288, value=1e-5), str(src), save_as_external_data=True, location="big.data")
    out = tmp_path / "fixed.onnx"
    assert main([str(src), str(out), "--passes", "fold-clip", "--no-verify", "--quiet"]) == 0
    assert (tmp_path / "fixed.onnx.data").stat().st_size >= 4 * 12288 * 12288 * 4 > 2**31
    x = np.ones((1, 12288), np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), rtol=1e-5)


def test_sessions_get_big_inline_weights_as_values_not_serialized(tmp_path):
    """Verification sessions: big inline initializers go to onnxruntime as OrtValues over their
    bytes (the serialized model holds stubs), small ones and external ones as before; the
    outputs are onnxruntime's own on the plain model."""
    from graphfix.onnxio.proto import Assembled, serialized
    from graphfix.runtime import session as session_mod

    m = weight_chain(3, 64)
    m.graph.initializer.append(numpy_helper.from_array(np.ones((4,), np.float32), "small"))
    stub, names, arrays = session_mod._hand_over(Assembled.of(m))
    assert names == ["w0", "w1", "w2"] and all(a.shape == (64, 64) for a in arrays)
    assert len(serialized(stub)) < 4096 and len(serialized(m)) > 3 * 64 * 64 * 4
    np.testing.assert_array_equal(arrays[1], numpy_helper.to_array(m.graph.initializer[1]))
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    got = session_mod.session(m, None).run(None, {"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    # mixed with real external data (those stay references onnxruntime reads from the folder),
    # and an initializer no node reads (onnxruntime drops it: it must stay inline)
    base = weight_chain(2, 1024)
    base.graph.node.append(helper.make_node("Add", [base.graph.output[0].name, "bias"], ["z"]))
    base.graph.output[0].name = "z"
    base.graph.initializer.append(numpy_helper.from_array(np.full((1, 1024), 0.5, np.float32), "bias"))
    onnx.save(base, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="e.bin", size_threshold=8192)
    ext = onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False)
    ext.graph.initializer.append(numpy_helper.from_array(np.ones((64, 64), np.float32), "unread"))
    assert session_mod._hand_over(Assembled.of(ext))[1] == ["bias"]
    x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
    np.testing.assert_array_equal(session_mod.session(ext, tmp_path).run(None, {"x": x})[0], _run(tmp_path / "ext.onnx", x))


def test_external_data_keys_that_are_not_text_are_refused_in_one_line(external_model: Path, capfd):
    """A corrupt file whose external-data keys are no longer UTF-8 and no longer say "location"
    (found by the mutation fuzz: three flipped bits) is an unreadable model, exit 2, not onnx's
    TypeError from sorting text and bytes keys (exit 3)."""
    data = external_model.read_bytes()
    assert data.count(b"location") >= 1 and data.count(b"offset") >= 1
    external_model.write_bytes(data.replace(b"location", b"locatioN").replace(b"offset", b"off\xffet"))
    before = _digests(external_model.parent)
    assert main([str(external_model), str(external_model.parent / "out.onnx"), "--quiet"]) == 2
    err = capfd.readouterr().err
    assert err.startswith("graphfix: error: ") and "not valid UTF-8" in err and len(err.strip().splitlines()) == 1, err
    assert _digests(external_model.parent) == before
