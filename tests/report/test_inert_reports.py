"""Model strings are data, never markup or terminal control: node, tensor and op names hold
anything (backticks, newlines, ``<script>``, entities, NUL, ESC, 100,000 characters), and every
report and printed line shows them as text. Markdown reports are rendered with marked (GFM, the
renderer of many CI summary pages and wikis; ``tests/report/markdown``) and the HTML it makes is parsed:
no element or attribute that a model string could have made may appear."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphfix.cli.main import main
from graphfix.report import text as text_mod
from tests.helpers.node_projects import installed, run_json

LONG = "L" * 100_000
#: One of each way a name could become markup, a line break, a terminal command or a huge page.
HOSTILE = ["a`b``c", "x\n# heading\n<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
           "\n```\n<script>alert(2)</script>\n```mermaid", "&lt;script&gt;alert(3)&lt;/script&gt;",
           "nul\x00esc\x1b[31mred\x07bel\rcr\x1b]0;title\x07", LONG, "|pipe|*em*_u_[link](javascript:alert(4))",
           "<a href='javascript:alert(5)'>x</a>", "` <b>bold</b> `"]
#: Terminal control characters: colour, title, bell, carriage return (rewrites the line), NUL.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def hostile_model(names: list[str] = HOSTILE) -> onnx.ModelProto:
    """A chain of Mods (rewritten by mod-decompose) and a NonZero (still blocked at 8.0), every
    node and tensor named after a hostile string."""
    nodes, prev = [], "input"
    for k, name in enumerate(names):
        nodes.append(helper.make_node("Mod", [prev, "c"], [f"t{k}{name}"], name=f"mod{k}{name}", fmod=1))
        prev = f"t{k}{name}"
    nodes.append(helper.make_node("NonZero", [prev], ["nz" + names[1]], name="nonzero" + HOSTILE[5] + HOSTILE[1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("nz" + names[1], TensorProto.INT64, [2, None])],
                              [numpy_helper.from_array(np.array(0.7, np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    """One run over the hostile model: every report, stdout and stderr."""
    tmp = tmp_path_factory.mktemp("hostile")
    onnx.save(hostile_model(), tmp / "hostile.onnx")
    mp = pytest.MonkeyPatch()
    import io
    import sys

    out, err = io.StringIO(), io.StringIO()
    mp.setattr(sys, "stdout", out)
    mp.setattr(sys, "stderr", err)
    try:
        code = main([str(tmp / "hostile.onnx"), str(tmp / "fixed.onnx"), "--trt", "8.0",
                     *(a for r in ("r.md", "r.html", "r.json") for a in ("--report", str(tmp / r)))])
    finally:
        mp.undo()
    assert code == 4, err.getvalue()  # the NonZero stays blocked at 8.0: the findings name it
    files = {r: (tmp / r).read_text(encoding="utf-8") for r in ("r.md", "r.html", "r.json")}
    return {**files, "stdout": out.getvalue(), "stderr": err.getvalue()}


class _Live(HTMLParser):
    """Every element and attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.add(tag)
        self.attrs.update(f"{tag}.{k}" for k, _ in attrs)


def _live(page: str) -> _Live:
    parser = _Live()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def marked() -> callable:
    project = installed("markdown", ("package.json", "package-lock.json", "render.mjs"))
    return lambda texts: run_json(project / "render.mjs", texts)


def test_markdown_report_renders_no_markup_from_the_model(written, marked):
    page = marked([written["r.md"]])[0]
    live = _live(page)
    assert not live.tags & {"script", "img", "a", "b", "h1", "h2", "h3", "em", "del"} - {"h1", "h2", "h3"}, live.tags
    assert not {a for a in live.attrs if a.split(".")[1].startswith("on") or a.endswith(".href") or a.endswith(".src")}
    # headings are graphfix's own: a model's newline starts none
    assert re.findall(r"<h1>(.*?)</h1>", page) == ["graphfix report"]

    # every string is shown as the text it is: marked's own escaping of the rendered text
    for shown in ("&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;",
                  "&amp;lt;script&amp;gt;alert(3)", "a`b``c", "nul\\x00esc\\x1b[31mred\\x07bel\\rcr"):
        assert shown in page, shown
    # the only fenced blocks are graphfix's diagrams, each whole
    fences = re.findall(r'<pre><code class="language-(\w+)">', page)
    assert fences and set(fences) == {"mermaid"}
    assert page.count("<pre>") == page.count("</pre>") == len(fences)


def test_markdown_and_html_are_bounded_and_json_is_whole(written):
    for report in ("r.md", "r.html"):
        assert LONG[: text_mod.MAX_NAME + 1] not in written[report]
        assert len(written[report]) < 200_000, report  # the model holds 300 KB of names
    data = json.loads(written["r.json"])
    assert any(LONG in n for r in data["nodes"] for n in r["nodes"])


def test_nul_and_terminal_controls_reach_no_report_and_no_terminal(written):
    for where in ("r.md", "r.html", "stdout", "stderr"):
        assert not CONTROL.search(written[where]), (where, CONTROL.search(written[where]))
    assert "\\x1b[31m" in written["stdout"] or "\\x1b[31m" in written["stderr"]
    json.loads(written["r.json"])  # JSON escapes them itself (\u0000, \u001b)


def test_html_report_shows_every_name_as_text(written):
    live = _live(written["r.html"])
    assert not live.tags & {"script", "img", "a", "b", "iframe"}
    assert not [a for a in live.attrs if a.split(".")[1].startswith("on") or a.endswith(".href") or a.endswith(".src")]


def test_table_and_findings_printed_on_one_line_each(written):
    """A name's newline would start a fake line ("status: ok"): it shows as \\n."""
    out = written["stdout"]
    assert "\n# heading" not in out and "x\\n# heading" in out
    assert all(len(line) < 5000 for line in out.splitlines())


@pytest.mark.parametrize("text", HOSTILE, ids=lambda s: repr(s[:24]))
def test_code_spans_cannot_be_closed(text, marked):
    """Each name alone in a table cell and in a list item renders as one <code> holding exactly
    the name (as visible escapes), nothing else."""
    docs = [f"| a |\n|---|\n| {text_mod.md_code(text)} |\n", f"- {text_mod.md_code(text, cell=False)}\n",
            f"- {text_mod.md_text(text)}\n"]
    pages = marked(docs)
    for page in pages[:2]:
        live = _live(page)
        assert live.tags <= {"table", "thead", "tbody", "tr", "th", "td", "ul", "li", "code"}, (text, page)
        assert page.count("<code>") == 1
    assert _live(pages[2]).tags <= {"ul", "li"}, pages[2]


def test_check_markdown_matrix_escapes_names(tmp_path, capfd, marked):
    path = tmp_path / "m`<img src=x onerror=alert(1)>.onnx"
    onnx.save(hostile_model(HOSTILE[:3]), path)
    assert main(["check", str(path), "--trt", "8.0", "--md"]) == 1
    out = capfd.readouterr().out
    page = marked([out])[0]
    assert not _live(page).tags & {"img", "script", "h1"}
    assert "onerror=alert(1)" in page  # shown, as text


def test_check_output_escapes_terminal_controls(tmp_path, capfd):
    onnx.save(hostile_model([HOSTILE[5], HOSTILE[1]]), tmp_path / "m.onnx")
    for extra in ([], ["--csv"]):
        assert main(["check", str(tmp_path / "m.onnx"), "--trt", "8.0", *extra]) == 1
        out = capfd.readouterr().out
        assert not CONTROL.search(out), (extra, out)
        assert "\\x1b[31m" in out
    assert main(["check", str(tmp_path / "m.onnx"), str(tmp_path / "m.onnx"), "--trt", "8.0,8.6"]) == 1
    assert not CONTROL.search(capfd.readouterr().out)
