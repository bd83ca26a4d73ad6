"""The verification-shape search: dims the graph relates although they are named apart (an LLM
decode step's mask covers its KV cache and the new tokens), latent inputs at latent sizes, and
every candidate inside a memory budget estimated before running it (a latent decoder)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphfix
from fixtures.recipes._onnx import FLOAT, init, inp, model, node, out
from graphfix.cli.main import main
from graphfix.errors import GraphfixError
from graphfix.verify.shapes import DEFAULT_MAX_MEMORY, Budget, choose, relations

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
DECODE_STEPS = ["gpt2_decode_kv_legacy", "gpt2_decode_kv_dynamo", "llama_decode_kv_legacy", "llama_decode_kv_dynamo"]


def _runs(m: onnx.ModelProto, calls: list | None = None):
    """The search's ``runs`` on a bare onnxruntime session: why the model cannot run there, if it cannot."""
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])

    def runs(shapes):
        if calls is not None:
            calls.append(shapes)
        try:
            session.run(None, {k: np.ones(v, np.float32) for k, v in shapes.items()})
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            return str(exc)
        return None

    return runs


# ---------------------------------------------------------------- relations
@pytest.mark.parametrize("name", DECODE_STEPS)
def test_decode_step_with_kv_cache_is_verified_without_input_shapes(name):
    result = graphfix.fix(str(REAL / f"{name}.onnx"), "all")
    rep = result.report
    assert rep.status == "ok", [p.reason for p in rep.passes if p.reason]
    assert any(p.verdict == "kept" and p.rewritten for p in rep.passes) and rep.sessions >= 2  # verified, not skipped
    sets = rep.shapes["shapes"]
    assert len(sets) == 2 and sets[0] != sets[1]
    for s in sets:
        assert s["attention_mask"][1] == s["past_key_0"][2] + s["input_ids"][1], s
        assert len({dims[0] for dims in s.values()}) == 1, s  # one batch
    assert "dims related by" in rep.shapes["reason"]


def test_decode_step_exits_0_on_the_command_line(tmp_path):
    report = tmp_path / "r.json"
    code = main([str(REAL / "gpt2_decode_kv_legacy.onnx"), str(tmp_path / "o.onnx"), "--passes", "all", "--quiet",
                 "--report", str(report)])
    rep = json.loads(report.read_text())
    assert code == 0 and rep["status"] == "ok"
    assert "total_sequence = past_sequence + sequence" in rep["shapes"]["reason"]


def test_llm_without_a_cache_keeps_its_typical_lengths():
    rep = graphfix.fix(str(REAL / "gpt2_no_cache.onnx"), "all").report
    assert rep.status == "ok"
    assert rep.shapes["shapes"] == [{"input_ids": [1, 16], "attention_mask": [1, 16]},
                                    {"input_ids": [2, 32], "attention_mask": [2, 32]}]


def _related(kind: str, names: tuple[str, str, str]) -> onnx.ModelProto:
    """``y`` added to something built from ``x`` (and ``z``): its length is ``x``'s (equal), one
    more (a new token), twice (x concatenated with itself) or ``x``'s plus ``z``'s (cache + new)."""
    n, m, k = names
    build = {"equal": [node("Identity", ["x"], ["t"])],
             "plus_one": [node("Concat", ["x", "one"], ["t"], axis=1)],
             "double": [node("Concat", ["x", "x"], ["t"], axis=1)],
             "sum": [node("Concat", ["x", "z"], ["t"], axis=1)]}[kind]
    inputs = [inp("x", FLOAT, [1, n]), inp("y", FLOAT, [1, m])] + ([inp("z", FLOAT, [1, k])] if kind == "sum" else [])
    return model([*build, node("Add", ["t", "y"], ["s"])], inputs, [out("s", FLOAT, [1, None])],
                 initializers=[init("one", np.ones((1, 1), np.float32))])


RELATION = {"equal": lambda s: s["y"][1] == s["x"][1], "plus_one": lambda s: s["y"][1] == s["x"][1] + 1,
            "double": lambda s: s["y"][1] == 2 * s["x"][1], "sum": lambda s: s["y"][1] == s["x"][1] + s["z"][1]}
_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(sorted(RELATION)), names=st.tuples(_NAME, _NAME, _NAME).filter(lambda t: len(set(t)) == 3))
def test_differently_named_dims_are_solved_from_the_graph(kind, names):
    m = _related(kind, names)
    choice = choose(m, [], _runs(m))
    assert len(choice.shapes) == 2 and choice.shapes[0] != choice.shapes[1]
    assert all(RELATION[kind](s) for s in choice.shapes), (kind, choice.shapes)
    assert "dims related by" in choice.reason or kind == "equal" and choice.shapes[0]["x"] == choice.shapes[0]["y"]


def test_without_relations_the_named_candidates_fail():
    """What the search did before: every symbol at the same size cannot run a decode step."""
    m = _related("plus_one", ("past", "total", "unused"))
    assert _runs(m)({"x": (1, 16), "y": (1, 16)}) is not None


def test_an_exporters_output_dim_names_tie_nothing():
    """A legacy VAE export names the image's batch and height alike (``Convimage_dim_0``): the
    search reads the graph, not the outputs' names, so batch and height stay apart."""
    m = _upsampler(8)
    m.graph.output[0].CopyFrom(out("image", FLOAT, ["Convimage_dim_0", 4, "Convimage_dim_0", "Convimage_dim_3"]))
    assert relations(m) == ([], [])
    choice = choose(m, [], _runs(m))
    assert [s["latent"] for s in choice.shapes] == [(1, 4, 32, 32), (2, 4, 64, 64)]


# ---------------------------------------------------------------- budget
def _upsampler(factor: int) -> onnx.ModelProto:
    """A latent decoder's shape: [batch, 4, height, width] resized ``factor`` x (nearest), then a 3x3 Conv."""
    scales = init("scales", np.array([1, 1, factor, factor], np.float32))
    w = init("w", np.full((4, 4, 3, 3), 0.01, np.float32))
    return model([node("Resize", ["latent", "", "scales"], ["up"], mode="nearest"),
                  node("Conv", ["up", "w"], ["image"], pads=[1, 1, 1, 1])],
                 [inp("latent", FLOAT, ["batch", 4, "height", "width"])], [out("image", FLOAT, [None, 4, None, None])],
                 initializers=[scales, w])


def test_a_latent_input_gets_latent_sizes_not_image_sizes():
    m = _upsampler(8)
    calls = []
    choice = choose(m, [], _runs(m, calls))
    assert [s["latent"] for s in choice.shapes] == [(1, 4, 32, 32), (2, 4, 64, 64)]
    assert all(c["latent"][2] <= 64 for c in calls)
    assert "the output is 8x height, width: a latent" in choice.reason


def test_an_image_input_that_is_not_upsampled_keeps_image_sizes():
    m = _upsampler(1)
    choice = choose(m, [], _runs(m))
    assert choice.shapes[0]["latent"] == (1, 4, 224, 224)


def test_candidates_over_the_memory_budget_are_not_run():
    m = _upsampler(8)
    budget = Budget(m)
    small, large = budget.cost({"latent": (1, 4, 32, 32)}).memory, budget.cost({"latent": (2, 4, 64, 64)}).memory
    assert small < large
    calls = []
    choice = choose(m, [], _runs(m, calls), max_memory=(small + large) // 2)
    assert (2, 4, 64, 64) not in [c["latent"] for c in calls]
    assert choice.shapes[0]["latent"] == (1, 4, 32, 32) and len(choice.shapes) == 2
    assert "over the memory budget" in choice.reason and "--max-memory" in choice.reason


def test_every_candidate_over_the_budget_is_one_line_that_says_so():
    m = _upsampler(8)
    calls = []
    with pytest.raises(GraphfixError, match="every candidate shape is over the budget.*--max-memory"):
        choose(m, [], _runs(m, calls), max_memory=1024)
    assert calls == []


@pytest.mark.parametrize("name", ["+".join(["N"] * 3000), "-" * 3000 + "N", "N*" * 150 + "N"], ids=["sum", "minuses", "product"])
def test_a_dim_named_by_a_long_expression_is_a_name_not_a_recursion(name):
    """A dim_param is understood (a short expression) or is a name: never parsed past Python's
    recursion limit. Each dim named so gets its own size, and the model runs there."""
    m = model([node("Relu", ["x"], ["y"])], [inp("x", FLOAT, [name, 3])], [out("y", FLOAT, [name, 3])])
    choice = choose(m, [], _runs(m))
    assert len(choice.shapes) == 2 and all(s["x"][1] == 3 for s in choice.shapes)


def test_a_search_that_runs_no_candidate_says_why_not_zero_tried():
    """Every candidate's inputs over the feed budget (a static 2e7-wide dim): none is run, and the
    refusal says why, not "(0 tried: )"."""
    m = model([node("Relu", ["x"], ["y"])], [inp("x", FLOAT, ["N", 20_000_000])], [out("y", FLOAT, ["N", 20_000_000])])
    calls = []
    with pytest.raises(GraphfixError) as info:
        choose(m, [], lambda shapes: calls.append(shapes), max_memory=1 << 40)
    assert calls == [] and "tried" not in str(info.value), str(info.value)
    assert "no candidate shape was run" in str(info.value) and "x:1x20000000" in str(info.value)


def test_the_estimate_sees_the_attention_matrix_of_a_latent_decoder():
    """At a 224x224 latent the mid-block attention alone is 50176^2 floats (10 GB): the
    estimate says so before anything runs (what grew a run to 20.9 GB)."""
    budget = Budget(onnx.load(str(REAL / "vae_decoder_legacy.onnx")))
    assert budget.cost({"latent": (1, 4, 224, 224)}).memory > 20 * 2**30
    assert budget.cost({"latent": (1, 4, 32, 32)}).memory < 256 * 2**20


_PEAK = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    import numpy as np
    import graphfix
    from graphfix.graph import replace_tensor
    from graphfix.passes import Pass
    from graphfix.passes.base import LIMIT, Rule

    def _identity_before(node_, ctx):  # an exact rewrite, so that the run verifies something
        replace_tensor(ctx.graph, node_.outputs[0], ctx.builder.op("Sigmoid", [ctx.builder.op("Identity", [node_.inputs[0]])]))

    def _untouched(node_, ctx):
        return not (node_.inputs and node_.inputs[0].inputs and node_.inputs[0].inputs[0].op == "Identity")

    touch = Pass("touch-sigmoid", "test", frozenset({{"Sigmoid"}}), (Rule(LIMIT, "all", "test", _untouched, evidence="test"),),
                 _identity_before, doc="test")
    result = graphfix.fix({model!r}, [touch])
    # this process's own peak: ru_maxrss keeps the parent's across exec (pytest's peak so far in the run)
    with open("/proc/self/status") as fh:
        peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) * 1024
    print(json.dumps({{"status": result.report.status, "shapes": result.report.shapes, "peak": peak,
                      "sessions": result.report.sessions, "kept": [p.name for p in result.report.passes if p.verdict == "kept"]}}))
""")


def test_latent_decoder_verified_under_the_default_memory_budget():
    """The AutoencoderKL decoder export, verified with no --input-shapes in a process whose address
    space is capped: a search that picked image sizes for the latent would fail here (not eat the
    machine), and the peak resident memory stays under the default --max-memory."""
    limit = DEFAULT_MAX_MEMORY + (2 << 30)  # the budget plus the interpreter, onnxruntime and its thread stacks
    script = _PEAK.format(limit=limit, model=str(REAL / "vae_decoder_legacy.onnx"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rep = json.loads(done.stdout.strip().splitlines()[-1])
    assert rep["status"] == "ok" and rep["kept"] == ["touch-sigmoid"] and rep["sessions"] >= 2
    # latent sizes (not image sizes that die under the cap, nor the 1x1 the ladder falls back to)
    assert all(16 <= s["latent"][k] <= 64 for s in rep["shapes"]["shapes"] for k in (2, 3)), rep["shapes"]
    assert rep["shapes"]["tried"] == 2  # nothing over the budget was run
    assert rep["peak"] < DEFAULT_MAX_MEMORY, rep["peak"]
    assert "--max-memory" in rep["shapes"]["reason"]


def test_max_memory_is_a_setting_in_the_report(tmp_path):
    report = tmp_path / "r.json"
    code = main([str(REAL / "vae_decoder_legacy.onnx"), str(tmp_path / "o.onnx"), "--no-verify", "--quiet",
                 "--max-memory", "512M", "--report", str(report)])
    assert code == 0
    assert json.loads(report.read_text())["settings"]["max_memory"] == 512 << 20


@pytest.mark.parametrize("value", ["lots", "0", "-4G", "12"])
def test_a_bad_max_memory_is_refused_in_one_line(value, capsys, tmp_path):
    code = main([str(REAL / "vae_decoder_legacy.onnx"), str(tmp_path / "o.onnx"), "--max-memory", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--max-memory" in err
    assert not (tmp_path / "o.onnx").exists()


def test_where_the_graph_says_nothing_the_runs_errors_suggest_the_relation(monkeypatch):
    """A graph onnxruntime's symbolic inference cannot follow: the decode step's Gather error
    ("indices element out of data bounds") has the search try one length as the sum of two others."""
    from graphfix.verify import shapes

    monkeypatch.setattr(shapes, "relations", lambda m: ([], []))
    rep = graphfix.fix(str(REAL / "gpt2_decode_kv_legacy.onnx"), "all").report
    assert rep.status == "ok"
    assert "the run's errors suggested: total_sequence = past_sequence + sequence" in rep.shapes["reason"]
    assert all(s["attention_mask"][1] == s["past_key_0"][2] + s["input_ids"][1] for s in rep.shapes["shapes"])
