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
from graphfix.runtime.worker import DEFAULT_TIMEOUT, MAX_TIMEOUT
from graphfix.settings.checks import ARGUMENTS, LOWEST_CONVERT_OPSET, MAX_ITERATIONS
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


def _defaults() -> dict[str, str]:
    """Every public argument's default as the docs show it (``repr``; "required" for none)."""
    found: dict[str, str] = {}
    for function in (graphfix.fix, graphfix.FixResult.save, graphfix.FixResult.save_report):
        for name, p in inspect.signature(function).parameters.items():
            if name != "self":
                found.setdefault(name, "required" if p.default is inspect.Parameter.empty else repr(p.default))
    return found


def test_every_argument_has_its_description_in_the_checks_and_the_docs():
    """A new keyword of graphfix.fix gets its type test and its row in docs/cli.md: what it takes
    and its default."""
    docs = (ROOT / "docs" / "cli.md").read_text()
    defaults = _defaults()
    assert [n for n in defaults if n not in ARGUMENTS] == []
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ") for line in docs.splitlines() if line.startswith("| `")}
    assert [n for n in defaults if n not in rows or rows[n][-1] != f"{ARGUMENTS[n][1]} |"] == []
    shown = {n: rows[n][2] for n in defaults}
    assert [n for n, d in defaults.items() if not shown[n].startswith(d if d == "required" else f"`{d}`")] == [], shown


@pytest.mark.parametrize("function", [graphfix.fix, graphfix.FixResult.save, graphfix.FixResult.save_report],
                         ids=["fix", "save", "save_report"])
def test_the_docstring_lists_what_each_argument_takes_and_its_default(function):
    doc = inspect.getdoc(function)
    defaults = _defaults()
    missing = [n for n in inspect.signature(function).parameters
               if n != "self" and f"- ``{n}`` [{defaults[n]}]: {ARGUMENTS[n][1]}" not in doc]
    assert missing == [], doc


def test_the_documented_limits_are_the_checked_ones():
    """The words of ARGUMENTS name limits that live in other modules: they must stay true."""
    assert f"None ({DEFAULT_TIMEOUT:g} s)" in ARGUMENTS["timeout"][1] and f"at most {MAX_TIMEOUT:g}" in ARGUMENTS["timeout"][1]
    assert f"0..{2**32 - 1}" in ARGUMENTS["seed"][1] and f"1..{MAX_ITERATIONS}" in ARGUMENTS["iterations"][1]
    assert f"from {LOWEST_CONVERT_OPSET} " in ARGUMENTS["convert_opset"][1]
