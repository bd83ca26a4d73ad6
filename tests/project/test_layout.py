"""The test tree keeps its shape: folders that mirror the package, files and tests named after
behaviour (never after an issue or an item number: those mean nothing to the next reader), test
modules that share code only through tests/helpers (a test module imported by another runs its
tests twice and ties the two together), and no sys.path edits (pyproject.toml's
``pythonpath = ["."]`` makes ``tests`` and ``fixtures`` importable)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: Named after an issue or a numbered item of one: test_issue18.py, test_13_explain_..., def test_issue_9.
#: A number followed by another (test_10_14_importer_refusals: TensorRT 10.14) is a release, not an item.
ISSUE_NAME = re.compile(r"issue|^test_\d+_(?!\d)", re.IGNORECASE)


def python_files(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*.py") if not {"node_modules", "__pycache__"} & set(p.parts))


def imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import names; ``from x import y`` also yields ``x.y`` (y may be a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [base, *(f"{base}.{a.name}" if base else a.name for a in node.names)]


def cross_imports(tests: Path) -> list[str]:
    """Imports of a test module, of any part of tests/ but tests.helpers, or relative ones (outside
    tests/helpers) by a module under tests/."""
    bad = []
    for path in python_files(tests):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(n, ast.Import | ast.ImportFrom):
                continue
            parts = [m.split(".") for m in imported_modules(n)]
            if (any(q.startswith("test_") or q == "conftest" for p in parts for q in p)
                    or any(p[:1] == ["tests"] and p[1:2] != ["helpers"] for p in parts)
                    or (getattr(n, "level", 0) and path.parent.name != "helpers")):
                bad.append(f"{path.relative_to(tests.parent)}:{n.lineno} {ast.unparse(n)}")
    return bad


def issue_names(tests: Path) -> list[str]:
    """Files, folders, test functions and test classes named after an issue or a numbered item."""
    bad = [str(p.relative_to(tests.parent)) for p in tests.rglob("*")
           if not {"node_modules", "__pycache__"} & set(p.parts) and ISSUE_NAME.search(p.stem)]
    for path in python_files(tests):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            named = isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name.lower().startswith("test")
            if named and ISSUE_NAME.search(n.name):
                bad.append(f"{path.relative_to(tests.parent)}:{n.lineno} {n.name}")
    return bad


def sys_path_edits(tests: Path) -> list[str]:
    """Any use of sys.path in the tests' own code (a child process's source text is not their code)."""
    bad = []
    for path in python_files(tests):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            attr = isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"
            imported = isinstance(n, ast.ImportFrom) and n.module == "sys" and any(a.name == "path" for a in n.names)
            if attr or imported:
                bad.append(f"{path.relative_to(tests.parent)}:{n.lineno}")
    return bad


def packages_missing(tests: Path) -> list[str]:
    """Folders holding Python files without __init__.py: two test_x.py in such folders would clash."""
    folders = {p.parent for p in python_files(tests)}
    return [str(f.relative_to(tests.parent)) for f in sorted(folders) if not (f / "__init__.py").exists()]


def loose_modules(tests: Path) -> list[str]:
    """Python files at the top of tests/ besides conftest.py and __init__.py: each belongs in the
    folder of the layer it tests (or in tests/helpers)."""
    return [p.name for p in sorted(tests.glob("*.py")) if p.name not in ("conftest.py", "__init__.py")]


def stale_test_paths(root: Path) -> list[str]:
    """``tests/...`` paths the README, docs/, bench/ and tools/ name that do not exist."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "bench").glob("*.py")),
             *sorted((root / "tools").glob("*.py"))]
    bad = []
    for page in pages:
        for target in re.findall(r"\btests/[\w./<>-]*[\w/]", page.read_text()):
            if "<" not in target and not (root / target).exists():
                bad.append(f"{page.relative_to(root)} names {target}")
    return bad


def test_no_test_module_imports_another():
    assert cross_imports(TESTS) == []


def test_files_and_tests_carry_behaviour_names_not_item_numbers():
    assert issue_names(TESTS) == []


def test_no_sys_path_edits():
    assert sys_path_edits(TESTS) == []


def test_every_test_folder_is_a_package():
    assert packages_missing(TESTS) == []


def test_every_test_module_sits_in_a_layer_folder():
    assert loose_modules(TESTS) == []


def test_tests_the_docs_name_exist():
    assert stale_test_paths(ROOT) == []


def test_the_rules_catch_the_old_flat_layout(tmp_path):
    """Each rule fails on what the flat tests/ folder held (a test that cannot fail is a defect)."""
    old = tmp_path / "tests"
    old.mkdir()
    (old / "conftest.py").write_text("import sys\nsys.path.insert(0, 'tests')\n")
    (old / "test_safety.py").write_text("def run():\n    pass\n")
    (old / "test_issue18.py").write_text("from test_safety import run\n\n\ndef test_13_explain_a_fifo():\n    run()\n")
    (old / "test_cli.py").write_text("from tests.test_safety import run\nfrom . import test_safety\n\n\n"
                                     "def test_10_14_importer_refusals():\n    run()\n")
    (old / "sub").mkdir()
    (old / "sub" / "test_x.py").write_text("")
    assert cross_imports(old) == ["tests/test_cli.py:1 from tests.test_safety import run",
                                  "tests/test_cli.py:2 from . import test_safety",
                                  "tests/test_issue18.py:1 from test_safety import run"]
    assert sorted(issue_names(old)) == ["tests/test_issue18.py", "tests/test_issue18.py:4 test_13_explain_a_fifo"]
    assert sys_path_edits(old) == ["tests/conftest.py:2"]
    assert packages_missing(old) == ["tests", "tests/sub"]
    assert loose_modules(old) == ["test_cli.py", "test_issue18.py", "test_safety.py"]
    (tmp_path / "README.md").write_text("`tests/test_fuzz.py` and `tests/test_cli.py`, per pass `tests/test_<name>.py`")
    assert stale_test_paths(tmp_path) == ["README.md names tests/test_fuzz.py"]
