"""The HTML report (``--report r.html``) in a real browser: headless Chromium (Debian package
``chromium``) loads the page from disk, offline, and we check what it rendered: the SVG
diagrams are in the DOM and hold shapes, nothing outside the file is referenced, and a
screenshot is not blank. String checks on the HTML alone cannot tell whether a browser draws it.

The browser is installed by the test itself when missing (``apt-get install chromium``, as
root, like tests/report/test_mermaid.py installs its npm packages), so the README's test command and
``.ci/run`` need nothing else; it skips only where there is no apt-get.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from graphfix.cli.main import main
from graphfix.report import model as model_mod
from graphfix.report import summary
from graphfix.report.diagram import DrawnGraph, diagram_graphs, mermaid_node
from graphfix.report.html import page, svg
from graphfix.report.model import KEPT, ROLLED_BACK, Report

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser")
#: What the page must never load: anything from a network (air-gapped deploy boxes).
EXTERNAL = re.compile(r"""\b(?:src|href|xlink:href)\s*=\s*["']?\s*(?:https?:|//)|url\(\s*["']?\s*(?:https?:|//)|@import""", re.I)


def _browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser, installed with apt-get when missing (root, or sudo without a password)."""
    found = _browser()
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and there is no apt-get to install it (Debian: apt-get install chromium)")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    for cmd in (["apt-get", *lock, "update", "-qq"], ["apt-get", *lock, "install", "-y", "-qq", "chromium"]):
        proc = subprocess.run([*sudo, *cmd], capture_output=True, text=True, env=env, timeout=1800, stdin=subprocess.DEVNULL)
        if proc.returncode:
            pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found = _browser()
    assert found, "apt-get installed chromium but no chromium binary is on PATH"
    return found


def _run_browser(chromium: str, *args: str) -> str:
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


# ------------------------------------------------------------------------------ a tiny PNG reader
def png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) to an (h, w, channels) array: zlib and
    the five scanline filters, no image library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {header}"
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, 1 + width * bpp)
    kind, data = raw[:, 0].astype(np.int32), raw[:, 1:].reshape(height, width, bpp).astype(np.int32)
    # Pixel (y, x) depends on its left, upper and upper-left neighbours only: decode by
    # anti-diagonals (x + y = t), each one vectorised; a zero border stands for "outside".
    out = np.zeros((height + 1, width + 1, bpp), np.int32)
    for t in range(height + width - 1):
        ys = np.arange(max(0, t - width + 1), min(height, t + 1))
        xs = t - ys
        left, up, ul = out[ys + 1, xs], out[ys, xs + 1], out[ys, xs]
        p = left + up - ul
        pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - ul)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, ul))
        f = kind[ys][:, None]
        pred = np.select([f == 0, f == 1, f == 2, f == 3], [0, left, up, (left + up) // 2], paeth)
        out[ys + 1, xs + 1] = (data[ys, xs] + pred) & 255
    return out[1:, 1:].astype(np.uint8)


def test_png_reader_decodes_every_filter():
    """A 3x5 RGB image written with filters 0-4 (one per row) reads back exactly."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (5, 3, 3), dtype=np.uint8)
    rows, prev = [], np.zeros(9, np.int32)
    for y, f in enumerate(range(5)):
        cur = img[y].reshape(-1).astype(np.int32)
        left = np.concatenate([np.zeros(3, np.int32), cur[:-3]])
        ul = np.concatenate([np.zeros(3, np.int32), prev[:-3]])
        p = left + prev - ul
        paeth = np.where((abs(p - left) <= abs(p - prev)) & (abs(p - left) <= abs(p - ul)), left,
                         np.where(abs(p - prev) <= abs(p - ul), prev, ul))
        pred = [0, left, prev, (left + prev) // 2, paeth][f]
        rows.append(bytes([f]) + ((cur - pred) % 256).astype(np.uint8).tobytes())
        prev = cur

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 5, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    assert np.array_equal(png_pixels(png), img)


# ------------------------------------------------------------------------------ the page itself
HOSTILE = ['<script>alert(1)</script>', 'a"b\'c', "x & y", "</svg><img src=http://evil/x>", "#quot;`md`"]


def _hostile_report() -> Report:
    """Node and tensor names that are markup, quotes, entities, URLs."""
    records = []
    for k, name in enumerate(HOSTILE):
        diagram = "\n".join(["flowchart LR", "  subgraph " + mermaid_node("before", "before"),
                             "    " + mermaid_node("bn0", f"Relu {name}"), "    " + mermaid_node("bt0", f"{name}: float32[1]", "tensor"),
                             "    bt0 --> bn0", "  end", "  subgraph " + mermaid_node("after", "after"),
                             "    " + mermaid_node("an0", f"Relu {name}"), "    " + mermaid_node("at0", f"{name}: float32[1]", "constant"),
                             "    at0 --> an0", "  end"])
        records.append({"passes": ["fold-clip"], "nodes": [f"Relu '{name}'"], "verdict": ROLLED_BACK if k else KEPT,
                        "checked": "on its own", "outputs": {name: {"max_abs": 1.0, "max_rel": 0.5, "passed": not k}},
                        "diagram": diagram})
    rep = Report(HOSTILE[0], HOSTILE[3], {"trt": "8.0"}, nodes=records, notes=list(HOSTILE))
    rep.passes.append(model_mod.PassRecord("fold-clip", ROLLED_BACK, 5, 5, reason=" ".join(HOSTILE)))
    return rep


def test_every_name_is_escaped():
    text = page(_hostile_report())
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "a&quot;b&#x27;c" in text and "x &amp; y" in text
    drawn = summary._drawn(summary.rewrite_groups(_hostile_report().nodes))
    assert text.count("<svg") == text.count("</svg>") == 2 * len(drawn)


def test_diagram_text_reads_back_as_drawn():
    """diagram_graphs is the inverse of the Mermaid writer: names come back unescaped."""
    rec = _hostile_report().nodes[4]
    sides = diagram_graphs(rec["diagram"])
    assert list(sides) == ["before", "after"]
    assert sides["before"].nodes == {"bn0": ("op", f"Relu {HOSTILE[4]}"), "bt0": ("tensor", f"{HOSTILE[4]}: float32[1]")}
    assert sides["after"].nodes["at0"] == ("constant", f"{HOSTILE[4]}: float32[1]") and sides["after"].edges == [("at0", "an0")]


def test_layout_puts_readers_right_of_what_they_read():
    g = DrawnGraph({"a": ("tensor", "a: f[1]"), "n": ("op", "Add n"), "c": ("constant", "c: f[1]"), "o": ("tensor", "o: f[1]")},
                   [("a", "n"), ("c", "n"), ("n", "o")])
    drawn = svg(g, "t", "after")
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)"', drawn)]
    assert len(xs) == 4 and xs[0] == xs[2] < xs[1] < xs[3]  # a and c, then the op, then o
    assert drawn.count("<path d=") == 3 + 1  # three edges and the arrow head


@pytest.mark.parametrize("name", ["r.txt", "r", "r.htm"])
def test_unknown_report_extensions_are_refused(name, tmp_path, capfd):
    model = ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"
    assert main([str(model), str(tmp_path / "f.onnx"), "--report", str(tmp_path / name), "--quiet"]) == 2
    assert ".html (HTML, one self-contained page)" in capfd.readouterr().err
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------ in Chromium
#: The fill of an op box in the SVG diagrams (report_html._STYLE): seen in the screenshot, the SVG was drawn.
OP_FILL = (0xDB, 0xE7, 0xFB)
CASES = {
    "demo": ("demo/superglue_matcher.onnx", ["--passes", "all"]),
    "swin": ("real/swin_dynamic_hw.onnx", ["--passes", "auto", "--trt", "8.5"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_html_report_renders_in_chromium(case, chromium, tmp_path):
    fixture, extra = CASES[case]
    page_path = tmp_path / f"{case}.html"
    assert main([str(ROOT / "fixtures" / fixture), str(tmp_path / "fixed.onnx"), *extra, "--report", str(page_path),
                 "--report", str(tmp_path / "r.json"), "--quiet"]) == 0
    source = page_path.read_text()
    assert not EXTERNAL.search(source), EXTERNAL.search(source)
    assert not list(tmp_path.glob(f"{case}.*.json")), "an HTML report has no polygraphy side files"

    dom = _run_browser(chromium, "--dump-dom", page_path.as_uri())
    assert "<h1>graphfix report</h1>" in dom
    svgs = re.findall(r"<svg\b.*?</svg>", dom, re.S)
    assert svgs and len(svgs) % 2 == 0, f"{len(svgs)} SVGs"
    for s in svgs:
        assert s.count("<rect") >= 2 and s.count("<path") >= 2, s[:500]
    assert not EXTERNAL.search(dom), EXTERNAL.search(dom)
    assert "Why: what each rewrite prevents" in dom and 'class="why"' in dom
    if case == "swin":
        assert "TensorRT 8.5 check" in dom and "after: 0 blocking finding(s)" in dom

    shot = tmp_path / f"{case}.png"
    _run_browser(chromium, f"--screenshot={shot}", "--window-size=1280,2000", page_path.as_uri())
    print(f"screenshot: {shot}")
    pixels = png_pixels(shot.read_bytes())
    assert pixels.shape[:2] == (2000, 1280)
    gray = pixels[..., :3].mean(axis=2)
    assert gray.std() > 10, f"blank screenshot {shot} (std {gray.std():.1f})"
    assert (gray < 100).mean() > 0.002, f"no dark text in {shot}"
    op_fill = (np.abs(pixels[..., :3].astype(int) - OP_FILL) <= 3).all(axis=2).sum()
    assert op_fill > 1000, f"no op box of a diagram drawn in the first 2000 px of {shot}"
