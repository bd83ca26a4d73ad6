"""Fuzz the command line with broken models (issue 9): random mutations of valid model bytes —
bit flips, truncations, deleted and duplicated fields, huge declared sizes, bad external-data
locations, and semantic ones onnxruntime may crash or hang on (empty input names, symbolic dims,
endless Loops) — each run through ``graphfix.cli.main.main`` in-process (a crash of onnxruntime in
graphfix's worker process must be an exit 2 here, not the end of the test process). Every run
must end with exit 0, 2 or 4 (written, blocking findings left), never 3 or a traceback; on exit 2 exactly one line on stderr (captured at
the file-descriptor level) and no output file, report, sidecar or temp file; the input and its
weights unchanged. A share of the cases (``valid_share``; tests/helpers/valid_mutations.py)
instead mutates one fixture of every registered pass, opt-in ones included, into a model that still
parses (issue 33): string, bool, fp16 and bf16 outputs beside the rewrite, pathological dim names
(thousands of terms or unary minuses, huge, unicode, operators) and out-of-spec attributes on the
nodes of the pass's pattern (wrong types, NaN/inf, huge or negative ints, out-of-range axes, unknown
enums, removed or repeated). Those also promise no silently wrong output: a model written after
verification gives the original's results in onnxruntime (:func:`wrong_output`). A case that
outlasts CASE_SECONDS is interrupted and recorded as a hang; the process is capped at MEMORY.

CI profile: 2000 mutations (about 10 s here before the semantic mutations, which run onnxruntime
on more of them, ~30 endless Loops each stopped at the 0.5 s budget), 5% of them a pass's fixture
mutated; ``pytest -m slow``: a collecting run over several seeds, 100000 mutations
(``GRAPHFIX_FUZZ=N`` for another count, ``GRAPHFIX_FUZZ_VALID`` the share of fixture mutations,
0.4 unless given), that
records every broken promise (an exit 3 above all) instead of stopping at the first, and lists
them at the end.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import resource
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.cli.main import main
from graphfix.onnxio.validate import checker_problem
from graphfix.runtime import session as runtime_session
from graphfix.runtime import worker as runtime_worker
from tests.helpers import valid_mutations

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [
    "fold_clip/superpoint_descriptor_norm.onnx", "fold_clip/clip_cast_bounds.onnx", "cumsum_decompose/gpt_position_ids.onnx",
    "pad_to_concat/reflection_pad2d.onnx", "einsum_to_matmul/superglue_attention.onnx", "bool_gather_cast/bert_mask_gather.onnx",
    "range_inputs/arange_over_argmax.onnx", "fold_clip/clip_shape_max_dynamic.onnx",
]
EXTERNAL = "external"  # a seed whose weights live in in.data
HUGE = [2**31, 2**40, 2**62, -1, -(2**40), 0]
#: Seconds an onnxruntime step may take in the fuzz (the fixtures run in milliseconds; an endless
#: Loop is stopped there, exit 2).
TIMEOUT = 0.5
#: Option sets the runs rotate through: verified, unverified, TensorRT-targeted (check + auto passes).
OPTIONS = [[], [], ["--no-verify"], ["--passes", "auto", "--trt", "8.6"], ["--trt", "7.2", "--iterations", "2"]]
#: Options of the cases that mutate a pass's fixture (besides the verification shapes and value
#: ranges it needs): verified with every pass, with its own pass alone (``--passes`` gets its
#: name), unverified, or for a release.
VALID_OPTIONS = [[], [], ["--passes", "?"], ["--no-verify"], ["--passes", "auto", "--trt", "8.6"]]
Rng = np.random.Generator


def _seeds() -> list[str]:
    return [s for s in SEEDS if (ROOT / "fixtures" / s).exists()] + [EXTERNAL]


def _external_seed(folder: Path) -> bytes:
    """MatMul + Clip whose weights are external data (in.data), as torch writes big models."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["m"]), node("Clip", ["m", "lo"], ["y"])], [inp("x", FLOAT, [2, 16])],
              [out("y", FLOAT, [2, 16])], [w, numpy_helper.from_array(np.array(0, np.float32), "lo")])
    onnx.save_model(m, str(folder / "seed.onnx"), save_as_external_data=True, location="in.data", size_threshold=0)
    return (folder / "seed.onnx").read_bytes()


# ---------------------------------------------------------------------------- byte mutations
def flip_bits(data: bytes, rng: Rng) -> tuple[bytes, str]:
    b = bytearray(data)
    k = int(rng.integers(1, 9))
    for _ in range(k):
        i = int(rng.integers(len(b)))
        b[i] ^= 1 << int(rng.integers(8))
    return bytes(b), f"flip {k} bit(s)"


def truncate(data: bytes, rng: Rng) -> tuple[bytes, str]:
    n = int(rng.integers(0, len(data)))
    return data[:n], f"truncate to {n}"


def splice(data: bytes, rng: Rng) -> tuple[bytes, str]:
    """Delete, duplicate or insert a byte range (wire-level deleted/duplicated fields)."""
    i, j = sorted(int(x) for x in rng.integers(0, len(data), 2))
    what = int(rng.integers(3))
    if what == 0:
        return data[:i] + data[j:], f"delete bytes {i}:{j}"
    if what == 1:
        return data[:j] + data[i:j] + data[j:], f"duplicate bytes {i}:{j}"
    return data[:i] + rng.bytes(int(rng.integers(1, 16))) + data[i:], f"insert random bytes at {i}"


def huge_length(data: bytes, rng: Rng) -> tuple[bytes, str]:
    """A length-delimited field claiming ~2^35 bytes."""
    i = int(rng.integers(1, len(data)))
    return data[:i] + b"\xff\xff\xff\xff\x7f" + data[i + 1:], f"huge varint at {i}"


# ---------------------------------------------------------------------------- proto mutations
def _repeated_fields(m: onnx.ModelProto) -> list:
    g = m.graph
    fields = [g.node, g.initializer, g.input, g.output, g.value_info, m.opset_import]
    for n in g.node:
        fields += [n.input, n.output, n.attribute]
    for vi in [*g.input, *g.output]:
        if vi.type.HasField("tensor_type"):
            fields.append(vi.type.tensor_type.shape.dim)
    for t in g.initializer:
        fields += [t.dims, t.external_data]
    return [f for f in fields if len(f)]


def delete_or_duplicate(m: onnx.ModelProto, rng: Rng) -> str:
    fields = _repeated_fields(m)
    if not fields:
        return "nothing to delete"
    f = fields[int(rng.integers(len(fields)))]
    i = int(rng.integers(len(f)))
    if rng.random() < 0.5:
        del f[i]
        return f"delete element {i} of a repeated field"
    try:
        f.add().CopyFrom(f[i])
    except AttributeError:  # scalar repeated field
        f.append(f[i])
    return f"duplicate element {i} of a repeated field"


def huge_sizes(m: onnx.ModelProto, rng: Rng) -> str:
    g = m.graph
    value = HUGE[int(rng.integers(len(HUGE)))]
    choices: list[Callable[[], str]] = []
    dims = [d for vi in [*g.input, *g.output] if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim]
    if dims:
        def dim() -> str:
            d = dims[int(rng.integers(len(dims)))]
            d.dim_value = value
            return f"dim = {value}"
        choices.append(dim)
    if g.initializer:
        def init_dims() -> str:
            t = g.initializer[int(rng.integers(len(g.initializer)))]
            if t.dims:
                t.dims[int(rng.integers(len(t.dims)))] = value
            else:
                t.dims.append(value)
            return f"initializer dim = {value}"
        choices.append(init_dims)

        def ext_length() -> str:
            t = g.initializer[int(rng.integers(len(g.initializer)))]
            for e in t.external_data:
                if e.key in ("length", "offset"):
                    e.value = str(value)
                    return f"external {e.key} = {value}"
            return "no external data"
        choices.append(ext_length)
    ints = [a for n in g.node for a in n.attribute if a.ints]
    if ints:
        def attr() -> str:
            a = ints[int(rng.integers(len(ints)))]
            a.ints[int(rng.integers(len(a.ints)))] = value
            return f"attribute {a.name} = {value}"
        choices.append(attr)
    return choices[int(rng.integers(len(choices)))]() if choices else "nothing to enlarge"


def retype(m: onnx.ModelProto, rng: Rng) -> str:
    g = m.graph
    k = int(rng.integers(5))
    if k == 0 and g.input:
        g.input[0].type.tensor_type.elem_type = int(rng.integers(0, 26))
        return "input elem_type"
    if k == 1 and g.node:
        n = g.node[int(rng.integers(len(g.node)))]
        if rng.random() < 0.5:
            n.input.append(f"nowhere{int(rng.integers(9))}")
        n.op_type = ["Loop", "If", "Scan", "Unknown", "Relu", "Reshape", "Pad", "Einsum"][int(rng.integers(8))]
        return f"op_type -> {n.op_type}"
    if k == 2:
        imp = m.opset_import[0] if m.opset_import else m.opset_import.add()
        imp.version = int(rng.integers(0, 30))
        return f"opset version {imp.version}"
    if k == 3:
        m.ir_version = int(rng.integers(0, 20))
        return f"ir_version {m.ir_version}"
    locations = ["/etc/passwd", "../in.data", "missing.data", "", "in.data/../../x", ".", "in.onnx"]
    for t in g.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = locations[int(rng.integers(len(locations)))]
                return f"location {e.value!r}"
    return "nothing to retype"


def clear_field(m: onnx.ModelProto, rng: Rng) -> str:
    """Delete a singular field (a graph, a type, a tensor's data, a node's domain...)."""
    g = m.graph
    messages = [m, g, *g.node, *g.initializer, *[vi.type for vi in [*g.input, *g.output]],
                *[vi.type.tensor_type for vi in [*g.input, *g.output]], *[a for n in g.node for a in n.attribute]]
    msg = messages[int(rng.integers(len(messages)))]
    fields = [f.name for f, _ in msg.ListFields()]
    if not fields:
        return "nothing to clear"
    name = fields[int(rng.integers(len(fields)))]
    msg.ClearField(name)
    return f"clear {type(msg).__name__}.{name}"


#: Trip count of the endless Loop a semantic mutation adds (with a constant true condition).
ENDLESS = 10**12


def semantic(m: onnx.ModelProto, rng: Rng) -> str:
    """A model that still parses and checks but that onnxruntime may crash or hang on (issue 23):
    an input becomes the empty name (an omitted optional input: Einsum(["x", ""]) with a symbolic
    dim segfaulted onnxruntime), a dim becomes symbolic, or an output goes through a Loop with a
    huge trip count and a constant true condition (runs for hours in one onnxruntime call)."""
    g = m.graph
    k = rng.choice(3, p=[0.45, 0.45, 0.1])
    if k == 0 and g.node:
        n = g.node[int(rng.integers(len(g.node)))]
        if n.input:
            i = int(rng.integers(len(n.input)))
            n.input[i] = ""
            return f"{n.op_type} input {i} = ''"
    dims = [d for vi in [*g.input, *g.output] if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim]
    if k <= 1 and dims:
        d = dims[int(rng.integers(len(dims)))]
        d.dim_param = ["N", "M", "batch", "s0"][int(rng.integers(4))]
        return f"dim -> {d.dim_param}"
    if g.output and g.output[0].type.HasField("tensor_type"):
        y = g.output[0]
        elem = y.type.tensor_type.elem_type
        body = onnx.helper.make_graph(
            [node("Identity", ["c_in"], ["c_out"]), node("Identity", ["v_in"], ["v_out"])], "endless",
            [onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
             onnx.helper.make_tensor_value_info("c_in", onnx.TensorProto.BOOL, []), onnx.helper.make_tensor_value_info("v_in", elem, None)],
            [onnx.helper.make_tensor_value_info("c_out", onnx.TensorProto.BOOL, []), onnx.helper.make_tensor_value_info("v_out", elem, None)])
        g.initializer.extend([numpy_helper.from_array(np.array(ENDLESS, np.int64), "gf_fuzz_trip"),
                              numpy_helper.from_array(np.array(True), "gf_fuzz_cond")])
        g.node.append(onnx.helper.make_node("Loop", ["gf_fuzz_trip", "gf_fuzz_cond", y.name], ["gf_fuzz_looped"], body=body))
        y.name = "gf_fuzz_looped"
        return f"Loop with trip count {ENDLESS}"
    return "nothing to mutate semantically"


BYTE_MUTATIONS = [flip_bits, truncate, splice, huge_length]
PROTO_MUTATIONS = [delete_or_duplicate, huge_sizes, retype, clear_field, semantic]


def mutate(data: bytes, rng: Rng) -> tuple[bytes, str]:
    if rng.random() < 0.45:
        f = BYTE_MUTATIONS[int(rng.integers(len(BYTE_MUTATIONS)))]
        return f(data, rng)
    m = onnx.ModelProto()
    m.ParseFromString(data)
    notes = [PROTO_MUTATIONS[int(rng.integers(len(PROTO_MUTATIONS)))](m, rng) for _ in range(int(rng.integers(1, 3)))]
    return m.SerializeToString(), "; ".join(notes)


# ---------------------------------------------------------------------------- the run
def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def fuzz(count: int, seed: int, work: Path, capfd, found: list[str] | None = None, valid_share: float = 0.0) -> dict[int, int]:
    """``count`` mutated models through the CLI. Each broken promise fails the test at once, or,
    given ``found``, is recorded there and the run goes on (the case's folder is kept).
    ``valid_share``: the share of cases that are a pass's fixture mutated but still parseable
    (:mod:`tests.helpers.valid_mutations`), rotating over every pass."""
    rng = np.random.default_rng(seed)
    seeds = _seeds()
    pass_seeds = valid_mutations.pass_seeds()
    ext_dir = work / "ext"
    ext_dir.mkdir()
    ext_bytes = _external_seed(ext_dir)
    codes: dict[int, int] = {}
    valid = 0
    for k in range(count):
        case = work / f"case{k}"
        case.mkdir()
        if rng.random() < valid_share:
            ps = pass_seeds[valid % len(pass_seeds)]
            valid += 1
            data, what = valid_mutations.mutate_seed(ps, rng)
            oracle = ps.pass_list != "all"  # opt-in rewrites change results by design
            name = f"{ps.pass_name}: {ps.path.name}"
            extra = [*ps.options, *(ps.pass_list if o == "?" else o for o in VALID_OPTIONS[int(rng.integers(len(VALID_OPTIONS)))])]
        else:
            name = seeds[k % len(seeds)]
            original = ext_bytes if name == EXTERNAL else (ROOT / "fixtures" / name).read_bytes()
            if name == EXTERNAL:
                shutil.copy(ext_dir / "in.data", case / "in.data")
            data, what = mutate(original, rng)
            extra = OPTIONS[int(rng.integers(len(OPTIONS)))]
            oracle = False
        src = case / "in.onnx"
        src.write_bytes(data)
        label = f"seed {seed} case {k} ({name}: {what}; {' '.join(extra)})"
        if CURRENT:
            Path(CURRENT).write_text(label + "\n")
        try:
            rc = _check_case(case, extra, capfd, label, oracle)
        except AssertionError as failed:
            if found is None:
                raise
            found.append(str(failed).splitlines()[0])
            continue
        codes[rc] = codes.get(rc, 0) + 1
        shutil.rmtree(case)
    return codes


#: ``GRAPHFIX_FUZZ_CURRENT=FILE``: each case's label is written there before it runs, so that a
#: crash of the test process itself (a segfault in graphfix's own process) names its case.
CURRENT = os.environ.get("GRAPHFIX_FUZZ_CURRENT")


#: How many runs ended because onnxruntime crashed or outlasted --timeout in graphfix's worker.
RUNTIME_STOPS: collections.Counter[str] = collections.Counter()


def _check_case(case: Path, extra: list[str], capfd, label: str, oracle: bool = False) -> int:
    """One run on ``case/in.onnx``: exit 0 with the files written, or exit 2 with one line and
    nothing written; the input and its weights untouched either way. ``oracle``: a model written
    after verification gives the original's results (:func:`wrong_output`)."""
    before = {p.name: _digest(p) for p in case.iterdir()}
    dst, rep = case / "out.onnx", case / "r.json"
    with _watchdog() as hung:
        rc = main([str(case / "in.onnx"), str(dst), "--quiet", "--report", str(rep), "--timeout", str(TIMEOUT), *extra])
    err = capfd.readouterr().err
    label = f"{label} exit {rc}: {err!r}"
    assert not hung, f"{label} hung: interrupted after {CASE_SECONDS} s"
    assert rc in (0, 2, 4), label  # 4: written, but the --trt target still rejects it
    for kind in ("died of", "did not finish"):  # onnxruntime crashed / hung in the worker: exit 2
        RUNTIME_STOPS[kind] += kind in err
    assert "Traceback" not in err, label
    assert {p.name: _digest(p) for p in case.iterdir() if p.name in before} == before, label
    if rc == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("graphfix: error: "), label
        assert sorted(p.name for p in case.iterdir()) == sorted(before), label
    else:
        # what onnx's checker says of the written model is what graphfix tolerates in an input:
        # nothing, or only what onnxruntime runs (an output typed without a shape)
        assert checker_problem(onnx.load(str(dst))) is None, label
        assert rep.exists() and not [p for p in case.iterdir() if p.name.startswith(".")], label
        if oracle and "--no-verify" not in extra:
            wrong = wrong_output(case)
            assert wrong is None, f"{label} silently wrong output: {wrong}"
    return rc


#: Seconds one case may take in graphfix's own process (they take well under one; onnxruntime's
#: steps are stopped at TIMEOUT in the worker) before the run is interrupted as a Ctrl-C would:
#: a hang is then a broken promise of its case, not the end of a collecting run.
CASE_SECONDS = 60


@contextlib.contextmanager
def _watchdog():
    """Inside: SIGALRM after CASE_SECONDS raises KeyboardInterrupt (graphfix's exit 130); the list
    yielded says whether it fired."""
    fired: list[bool] = []

    def interrupt(signum, frame):  # noqa: ARG001 - signal's signature
        fired.append(True)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: The oracle's tolerance, far wider than graphfix's (a rewrite rounds differently; fp16/bf16 by 4
#: of their ulps): what it flags is a wrong rewrite, not rounding.
ORACLE_TOLERANCE = {np.dtype(np.float16): 1e-2, "bfloat16": 5e-2}


def _differs(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if a.dtype.kind != "f":
        return bool((a != b).any())
    tol = ORACLE_TOLERANCE.get(a.dtype, ORACLE_TOLERANCE.get(a.dtype.name, 1e-3))
    x, y = a.astype(np.float64), b.astype(np.float64)
    scale = float(np.abs(x[np.isfinite(x)]).max()) if np.isfinite(x).any() else 1.0
    return not np.allclose(x, y, rtol=tol, atol=tol * max(scale, 1.0), equal_nan=True)


def wrong_output(case: Path) -> str | None:
    """The outputs of ``case/in.onnx`` and the written ``case/out.onnx``, run in graphfix's
    onnxruntime worker (a crash is onnxruntime's, not the test process's) on the inputs graphfix
    verified with (the report's polygraphy inputs): the first output that differs beyond rounding,
    and not because onnxruntime's own result varies from run to run (the original run again
    disagrees with itself), or None. No report inputs (nothing was verified) or onnxruntime
    failing here: None; the run's promise is judged by its exit and files."""
    inputs = case / "r.inputs.json"
    if not inputs.exists():
        return None
    from polygraphy.json import load_json

    try:
        with runtime_worker.time_budget(30):
            before = runtime_session.session(onnx.load(str(case / "in.onnx")), case)
            after = runtime_session.session(onnx.load(str(case / "out.onnx")), case)
            for i, feed in enumerate(load_json(str(inputs))):
                want, got = before.run_named(dict(feed)), after.run_named(dict(feed))
                for name, value in want.items():
                    if name in got and _differs(value, got[name]) and not _differs(value, before.run_named(dict(feed))[name]):
                        return f"output {name!r} differs on input set {i}"
    except Exception:  # noqa: BLE001 - onnxruntime refusing or failing here decides nothing
        return None
    return None


#: Address space of the test process (and so of graphfix's worker) while it fuzzes: a mutation that
#: makes graphfix allocate without bound (an ``axis`` of -2147483649 expanded into a list) is then
#: a MemoryError of its case, not the machine's out-of-memory killer ending the run.
#: Counted above what the process has mapped when the fuzz starts (after a whole suite, onnxruntime's
#: arenas and every module: a flat 6 GiB left no room to start the worker, exit 3 on ENOMEM).
MEMORY = 6 << 30


def _mapped() -> int:
    """This process's address space now (VmSize), in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))


@contextlib.contextmanager
def _capped():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _mapped() + MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_fuzz_cli(tmp_path, capfd):
    with _capped():
        codes = fuzz(2000, 20240609, tmp_path, capfd, valid_share=0.05)
    assert codes.get(0, 0) >= 100 and codes.get(2, 0) >= 1000, codes  # both paths are exercised


#: The share of the collecting run's cases that mutate a pass's fixture into a model that still parses
#: (``GRAPHFIX_FUZZ_VALID`` for another).
VALID_SHARE = float(os.environ.get("GRAPHFIX_FUZZ_VALID", "0.4"))
#: Seeds of the collecting run; ``GRAPHFIX_FUZZ_SEEDS=7,11`` picks some (to run them in parallel).
SLOW_SEEDS = (7, 11, 13, 17, 19)


@pytest.mark.slow
def test_fuzz_cli_collecting(tmp_path, capfd):
    """``GRAPHFIX_FUZZ`` mutations (default 100000) over several seeds; every broken promise is
    collected (exit 3 first among them) and all are listed at the end, none expected."""
    seeds = [int(s) for s in os.environ.get("GRAPHFIX_FUZZ_SEEDS", ",".join(map(str, SLOW_SEEDS))).split(",")]
    total = int(os.environ.get("GRAPHFIX_FUZZ", "100000"))
    found: list[str] = []
    codes: dict[int, int] = {}
    started = time.monotonic()
    for seed in seeds:
        work = tmp_path / f"seed{seed}"
        work.mkdir()
        with _capped():
            ran = fuzz(-(-total // len(seeds)), seed, work, capfd, found, VALID_SHARE)
        for rc, n in ran.items():
            codes[rc] = codes.get(rc, 0) + n
    summary = f"{sum(codes.values()) + len(found)} mutations in {time.monotonic() - started:.0f} s, exits {codes}"
    with capfd.disabled():
        print(f"\nfuzz: {summary}, {len(found)} broken promise(s), "
              f"{sum(' exit 3: ' in f for f in found)} exit 3, onnxruntime stopped in its worker (exit 2): "
              f"{dict(RUNTIME_STOPS)}")
    assert not found, f"{summary}; {len(found)} broken:\n" + "\n".join(found[:50])
