"""Every pass declares itself completely, and its declared range is exactly where it fires.

A pass's ``needed_by`` is the union of its rules' ranges; ``match`` is "a rule holds for the
target". This test proves the two agree on real patterns: over every documented release, the
releases for which ``match`` fires on at least one node of the pass's fixtures are exactly the
releases in its declared range.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys

import pytest

from fixtures.make_fixtures import all_fixtures
from graphfix import passes
from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, to_graph
from graphfix.graph.importer import all_graphs
from graphfix.passes.base import KINDS, Context
from graphfix.trt import support
from graphfix.trt.versions import TrtVersion, VersionRange

IDS = {e["id"] for e in support.errors()}
DOCUMENTED = [v for v in support.versions() if "-" not in v]


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_pass_declaration(p):
    assert p.name and p.summary and p.doc and p.ops and p.rules
    assert set(p.fixes) <= IDS, set(p.fixes) - IDS
    for rule in p.rules:
        assert rule.kind in KINDS and rule.message and rule.evidence, rule
        VersionRange(rule.versions)
    assert any(TrtVersion(v) in p.versions for v in support.versions())


def _fires(p, graphs, version: str) -> bool:
    for graph in graphs:
        for g in all_graphs(graph):
            g.opset = graph.opset
            ctx = Context(g, Builder(g), Folder(g), TrtVersion(version))
            if any(p.match(n, ctx) for n in g.nodes):
                return True
    return False


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_declared_range_is_where_match_fires_on_fixtures(p):
    graphs = [to_graph(fx.build()) for _, fx in all_fixtures() if p.name in fx.passes]
    assert graphs, f"{p.name} has no fixture"
    fires = {v for v in DOCUMENTED if _fires(p, graphs, v)}
    declared = {v for v in DOCUMENTED if TrtVersion(v) in p.versions}
    assert fires == declared, f"{p.name}: declared {p.needed_by}; fires but undeclared {sorted(fires - declared, key=TrtVersion)}, declared but never fires {sorted(declared - fires, key=TrtVersion)}"


def test_names_are_unique_and_kebab_case():
    all_p = passes.all_passes()
    assert len({p.name for p in all_p}) == len(all_p)
    assert all(p.name == p.name.lower() and " " not in p.name for p in all_p)


def _pass_modules() -> list[str]:
    """Every module of graphfix/passes/ that defines a PASS (helpers are ``_``-prefixed, base is the framework)."""
    found = []
    for info in pkgutil.iter_modules(passes.__path__):
        if info.name != "base" and not info.name.startswith("_"):
            module = importlib.import_module(f"graphfix.passes.{info.name}")
            assert isinstance(getattr(module, "PASS", None), passes.Pass), f"graphfix/passes/{info.name}.py defines no PASS"
            found.append(module.__name__)
    return found


def _pipeline_problems(modules: list[str], listed: list[str]) -> list[str]:
    problems = [f"{m} is not in PIPELINE" for m in modules if m not in listed]
    problems += [f"{m} is listed {listed.count(m)} times" for m in sorted(set(listed)) if listed.count(m) > 1]
    return problems + [f"{m} is listed but is no pass module" for m in sorted(set(listed) - set(modules))]


def test_pipeline_lists_every_pass_module_exactly_once():
    modules, listed = _pass_modules(), [m.__name__ for m in (*passes.PIPELINE, *passes.OPT_IN)]  # OPT_IN: the inexact ones
    assert _pipeline_problems(modules, listed) == []
    assert not {m.__name__ for m in passes.OPT_IN} & {m.__name__ for m in passes.PIPELINE}
    assert [p.name for p in passes.all_passes()] == [m.PASS.name for m in passes.PIPELINE]
    # the check itself: a module left out, or listed twice, is caught
    assert _pipeline_problems(modules, listed[1:]) == [f"{listed[0]} is not in PIPELINE"]
    assert _pipeline_problems(modules, [*listed, listed[3]]) == [f"{listed[3]} is listed 2 times"]


def test_no_pass_module_imports_another():
    """Passes share code through the ``_``-prefixed helper modules, never through each other, so
    the PIPELINE list is the one place that knows every pass."""
    modules = set(_pass_modules())
    imports = []
    for name in sorted(modules):
        for node in ast.walk(ast.parse(inspect.getsource(sys.modules[name]))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            imports += [f"{name} imports {t}" for t in targets if t in modules and t != name]
    assert imports == []


def test_version_ranges():
    r = VersionRange("<8.0 || >=10.8")
    assert "7.2" in r and "10.8" in r and "11.1" in r and "8.6" not in r
    assert "8.2-EA" in VersionRange(">=8.0,<8.2") and "8.2" not in VersionRange(">=8.0,<8.2")
    assert TrtVersion("7.2-ngc21.05") > TrtVersion("7.2") and TrtVersion("8.4.3") > TrtVersion("8.4")
    assert support.describe_range(VersionRange("<8.0 || >=10.8")) == "<8.0 || >=10.8"
    assert support.describe_range(VersionRange("all")) == "all"


def _module_functions(module) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(module))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _calls(fn: ast.FunctionDef) -> set[str]:
    """Names a function refers to (calls, and functions passed on as values)."""
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}


#: What only a rewrite does: build nodes and move tensors (a predicate may parse, fold and walk).
_REWRITING = {"builder", "replace_tensor"}


def _reached(start: str, functions: dict[str, ast.FunctionDef]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        todo.extend(_calls(functions[name]) & functions.keys())
    return seen


def _predicates(p):
    module = sys.modules[p.rewrite.__module__]
    for rule in p.rules:
        for predicate in (rule.when, p.forced):
            if predicate is not None and predicate.__module__ == module.__name__:
                yield rule, predicate


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_no_rule_reaches_the_rewrite(p):
    """A rule says what a release rejects, whatever graphfix can rewrite. Walks every rule's
    predicate (and what it calls in the pass's module): none may reach the rewrite or build nodes."""
    functions = _module_functions(sys.modules[p.rewrite.__module__])
    for rule, predicate in _predicates(p):
        reached = _reached(predicate.__name__, functions)
        used = set().union(*(_calls(functions[f]) for f in reached))
        assert p.rewrite.__name__ not in reached and not used & _REWRITING, (
            f"{p.name}: rule {rule.message!r} predicate {predicate.__name__} reaches "
            f"{sorted((used & _REWRITING) | (reached & {p.rewrite.__name__}))}")


def _blocking_nodes(models, releases) -> set[tuple[str, str]]:
    from graphfix.check.findings import BLOCKING, check_model

    return {(v, f.node) for v in releases for m in models for f in check_model(m, v).findings if f.severity == BLOCKING}


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_findings_do_not_shrink_when_no_rewrite_exists(p, monkeypatch):
    """range-inputs once matched only the Range nodes its plan could rewrite, so `check --trt 8.0`
    called a rejected float arange clean. Where a rule's predicate asks the pass's plan (how it
    would rewrite), every plan is made to say "no rewrite" and `graphfix check` must still flag
    every node it flagged, on every fixture of the pass and every documented release (range-bound:
    check's own shape-tensor analysis flags a data-dependent Range whether a bound exists or not)."""
    module = sys.modules[p.rewrite.__module__]
    functions = _module_functions(module)
    plans = {f for _, predicate in _predicates(p) for f in _reached(predicate.__name__, functions) if "plan" in f.lower()}
    if not plans:
        return
    models = [fx.build() for _, fx in all_fixtures() if p.name in fx.passes]
    before = _blocking_nodes(models, DOCUMENTED)
    for name in plans:
        monkeypatch.setattr(module, name, lambda *args, **kw: None)
    after = _blocking_nodes(models, DOCUMENTED)
    assert before <= after, f"{p.name}: without a rewrite plan, check no longer flags {sorted(before - after)}"
