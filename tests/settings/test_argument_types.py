"""Every argument of ``graphfix.fix`` (and of ``FixResult.save``/``save_report``) is type-checked
before any work, in one GraphfixError line that names the argument and says what it takes: never a
TypeError/AttributeError from deep inside, a whole object printed back, or a wrong type silently
taken (``timeout=True`` as a 1 s budget, ``verify='no'`` verifying)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphfix
from graphfix.errors import GraphfixError
from graphfix.settings.checks import ARGUMENTS
from tests.helpers.cli_runs import FIXTURE, ROOT


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "in.onnx"
    p.write_bytes(FIXTURE.read_bytes())
    return p


@pytest.mark.parametrize("kw", [
    {"passes": 5}, {"passes": [None]}, {"skip": [1]}, {"force": 3}, {"trt": 8.6},
    {"input_shapes": "x:2x8"}, {"input_shapes": [{"feat": 4}]}, {"fix_shapes": [("feat", (1, 4, 3, 3))]},
    {"profile_shapes": 5}, {"val_range": {"feat": (1,)}}, {"val_range": {"feat": ("a", "b")}},
    {"output": 123}, {"inputs": {"feat": np.zeros((1, 4, 3, 3), np.float32)}}, {"inputs": 7},
    {"timeout": True}, {"verify": "no"}, {"verify_each": 1}, {"strict": None}, {"simplify": "yes"},
    {"atol": True}, {"rtol": "0.1"}, {"progress": "bar"}, {"max_memory": True},
])
def test_wrong_types_are_refused_in_one_line_naming_the_argument(kw, src):
    (name, value), = kw.items()
    with pytest.raises(GraphfixError) as info:
        graphfix.fix(src, **kw)
    message = str(info.value)
    assert message.startswith(f"{name}=") and ": expected " in message, message
    assert "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("model", [b"\x08\x07" * 5000, "graph"])
def test_a_model_of_the_wrong_type_is_named_by_its_type_not_printed(model, src):
    model = onnx.load(str(src)).graph if model == "graph" else model
    with pytest.raises(GraphfixError) as info:
        graphfix.fix(model)
    message = str(info.value)
    assert message.startswith(f"model=<{type(model).__name__}>: expected ") and "\n" not in message, message


def test_save_and_save_report_refuse_what_is_not_a_path(src):
    result = graphfix.fix(src, verify=False)
    for call, expect in ((lambda: result.save(None), "save(path=None)"),
                         (lambda: result.save_report(None), "save_report(path=None)"),
                         (lambda: result.save(src.with_name("out.onnx"), external_data=5), "save(external_data=5)")):
        with pytest.raises(GraphfixError, match=r"^" + expect.replace("(", r"\(").replace(")", r"\)") + ": expected"):
            call()


def test_skip_and_force_take_a_comma_separated_string_like_passes(src):
    ran = graphfix.fix(src, skip="fold-clip", verify=False)
    assert "fold-clip" not in [p.name for p in ran.report.passes]


def test_every_argument_has_its_description_in_the_checks_and_the_docs():
    """A new keyword of graphfix.fix gets its type test and its line in docs/cli.md."""
    docs = (ROOT / "docs" / "cli.md").read_text()
    names = [*inspect.signature(graphfix.fix).parameters, "path", "external_data"]
    assert [n for n in names if n not in ARGUMENTS] == []
    rows = {line.split(" | ")[0].strip("| `"): line for line in docs.splitlines() if line.startswith("| `")}
    assert [n for n in names if not rows.get(n, "").endswith(f"| {ARGUMENTS[n][1]} |")] == []
