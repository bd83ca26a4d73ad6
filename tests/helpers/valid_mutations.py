"""Mutations of models a pass rewrites that keep them parseable (issue 33's audit): outputs of
types verification compares differently beside the rewrite (strings, bools, fp16, bf16),
pathological dim names, and out-of-spec attributes on the nodes of every pass's pattern. The
mutated model may be one onnxruntime refuses (exit 2, one line) or one it runs: then graphfix must
rewrite it right, leave it, or roll back, never exit 3.

A seed is one fixture per registered pass (the first of its recipes that it rewrites), plus the
opt-in passes on onnxruntime-quantized files, each run with the options it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fixtures.make_fixtures import all_fixtures, path_of
from graphfix import passes

ROOT = Path(__file__).resolve().parents[2]
Rng = np.random.Generator


@dataclass(frozen=True)
class PassSeed:
    """A model ``pass_name`` rewrites, and the CLI options it is verified with."""

    pass_name: str
    path: Path
    ops: frozenset[str]
    options: tuple[str, ...]

    @property
    def pass_list(self) -> str:
        """What ``--passes`` names to run the pass alone (an opt-in pass is in no pass list: all)."""
        return self.pass_name if self.pass_name in {p.name for p in passes.all_passes()} else "all"


def _shape_options(fx) -> tuple[str, ...]:
    opts: list[str] = []
    if fx.input_shapes:
        opts += ["--input-shapes", *(f"{k}:{'x'.join(map(str, v))}" for k, v in fx.input_shapes.items())]
    for k, (lo, hi) in fx.val_range.items():
        opts += ["--val-range", f"{k}:[{lo},{hi}]"]
    return tuple(opts)


@cache
def pass_seeds() -> tuple[PassSeed, ...]:
    """One rewritten fixture per pass of the pipeline, and the opt-in passes' quantized models."""
    first: dict[str, PassSeed] = {}
    for group, fx in all_fixtures():
        for name in fx.passes:
            if name not in first and not fx.finding:
                first[name] = PassSeed(name, path_of(group, fx), passes.get(name).ops, _shape_options(fx))
    missing = [p.name for p in passes.all_passes() if p.name not in first]
    assert not missing, f"passes without a fixture they rewrite: {missing}"
    real = ROOT / "fixtures" / "real"
    opt_in = [PassSeed("dequantize-dynamic", real / "ortquant_mlp_dynamic_s8.onnx", passes.opt_in("dequantize-dynamic").ops,
                       ("--dequantize-dynamic",)),
              PassSeed("requantize-symmetric", real / "ortquant_mlp_qdq_u8u8_asym.onnx", passes.opt_in("requantize-symmetric").ops,
                       ("--requantize-symmetric",))]
    return tuple(first[p.name] for p in passes.all_passes()) + tuple(s for s in opt_in if s.path.exists())


# ---------------------------------------------------------------------------- outputs of other types
def _tensors(m: onnx.ModelProto) -> list[str]:
    """Tensors of the main graph an output can be made from (node outputs and inputs)."""
    return [t for n in m.graph.node for t in n.output if t] + [i.name for i in m.graph.input]


def odd_outputs(m: onnx.ModelProto, rng: Rng) -> str:
    """One more output beside the rewrite: a tensor of the graph cast to a string, bool, fp16 or bf16,
    a string constant, or a string input passed through (verification must feed strings)."""
    g = m.graph
    k = int(rng.integers(7))
    name = f"gf_fuzz_out{len(g.output)}"
    if k == 5:
        g.node.append(helper.make_node("Constant", [], [name], value=helper.make_tensor("s", TensorProto.STRING, [2], [b"a", "\u00e9".encode()])))
        g.output.append(helper.make_tensor_value_info(name, TensorProto.STRING, [2]))
        return "string constant output"
    if k == 6:
        g.input.append(helper.make_tensor_value_info(f"gf_fuzz_in{len(g.input)}", TensorProto.STRING, ["S"]))
        g.node.append(helper.make_node("Identity", [g.input[-1].name], [name]))
        g.output.append(helper.make_tensor_value_info(name, TensorProto.STRING, ["S"]))
        return "string input passed to an output"
    to = [TensorProto.STRING, TensorProto.STRING, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.BFLOAT16][k]
    tensors = _tensors(m)
    if not tensors:
        return "no tensor to cast"
    src = tensors[int(rng.integers(len(tensors)))]
    g.node.append(helper.make_node("Cast", [src], [name], to=to))
    if to in (TensorProto.FLOAT16, TensorProto.BOOL) and rng.random() < 0.5:  # computed in that type, not only cast
        g.node.append(helper.make_node("Identity" if to == TensorProto.BOOL else "Neg", [name], [name + "_c"]))
        name += "_c"
    g.output.append(helper.make_tensor_value_info(name, to, None))
    return f"{TensorProto.DataType.Name(to)} output from {src!r}"


# ---------------------------------------------------------------------------- dim names
def _dim_names() -> list[str]:
    return [
        "N+" * 3000 + "N", "-" * 3000 + "N", "(" * 3000 + "N" + ")" * 3000, "N*" * 3000 + "N", "x" * 100_000,
        "\u6279\u6b21", "N-1", "2*N", "N/2", "N//0", "N%0", "N**N**N", "9**9**9", "__import__('os')", "N if N else N",
        "lambda: N", "[N]", "N.real", "  N  ", "N\nM", "\x00", "9" * 5000, "1e308", "-1", "0", "N==M", "N and M",
        "N;M", "a.b", "unk__0", "batch_size + sequence_length", "'N'", "*".join(["99999999"] * 24), "N-N", "N*0",
        "-N", "\ud7ff", "N" * 199 + "+1", "(N+1)//2*2-N", "N % 3",
    ]


def _dims_of(vi: onnx.ValueInfoProto) -> list:
    return list(vi.type.tensor_type.shape.dim) if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") else []


def long_dims(m: onnx.ModelProto, rng: Rng) -> str:
    """Pathological dim_params on inputs, outputs or value_infos (one added for a node's output when
    the graph has none): thousands of terms or unary minuses, huge names, unicode, operators."""
    g = m.graph
    names = _dim_names()
    where = int(rng.integers(3))
    infos = [g.input, g.output, g.value_info][where]
    if where == 2 and (not infos or rng.random() < 0.5):
        tensors = [t for n in g.node for t in n.output if t]
        if tensors:
            t = tensors[int(rng.integers(len(tensors)))]
            g.value_info.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, [None] * int(rng.integers(1, 5))))
    dims = [d for vi in infos for d in _dims_of(vi)]
    if not dims:
        return "no dim to rename"
    count = int(rng.integers(1, 4))
    picked = []
    for _ in range(count):
        d = dims[int(rng.integers(len(dims)))]
        d.dim_param = names[int(rng.integers(len(names)))]
        picked.append(repr(d.dim_param[:24]) + (f"...({len(d.dim_param)} chars)" if len(d.dim_param) > 24 else ""))
    return f"{['input', 'output', 'value_info'][where]} dims -> {', '.join(picked)}"


# ---------------------------------------------------------------------------- out-of-spec attributes
_FLOATS = [math.nan, math.inf, -math.inf, 1e38, -1e38, 0.0, -0.0, 1e-45, -1.0, 7.0]
_INTS = [2**62, -(2**62), 2**31, -(2**31) - 1, -1, 0, 7, 1000, -1000, 2]
_STRINGS = ["", "bogus", "NEAREST", "\u00e9\u6f22", "a" * 10_000, "\x00", "linear ", "DCR\n"]
#: Attribute names of contrib ops (no onnx schema), tried where absent.
_CONTRIB = ["epsilon", "scale", "num_heads", "kv_num_heads", "interleaved", "is_causal", "axis", "alpha", "beta",
            "unidirectional", "do_rotary", "rotary_embedding_dim", "activation", "mask_filter_value", "softcap"]


def _schema_attributes(node: onnx.NodeProto, opset: int) -> dict[str, int]:
    """The attribute names (and types) the op's schema declares, where onnx knows the op."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return {}
    return {name: int(a.type) for name, a in schema.attributes.items()}


def _value(kind: int, rng: Rng) -> tuple[object, int]:
    """An out-of-spec value of attribute type ``kind`` (an AttributeProto.AttributeType), or of
    another type (a wrong type), and the type it has."""
    A = onnx.AttributeProto
    if rng.random() < 0.3:  # a wrong type
        kind = [A.FLOAT, A.INT, A.STRING, A.INTS, A.FLOATS, A.STRINGS, A.TENSOR][int(rng.integers(7))]
    if kind == A.FLOAT:
        return _FLOATS[int(rng.integers(len(_FLOATS)))], kind
    if kind == A.INT:
        return _INTS[int(rng.integers(len(_INTS)))], kind
    if kind == A.STRING:
        return _STRINGS[int(rng.integers(len(_STRINGS)))], kind
    if kind == A.INTS:
        return [[], [99], [-99], [0, 0], [2**62], [1] * 10_000, [-1, -2, -3, -4, -5, -6, -7], [0, 1, 2, 3, 4, 5, 6, 7, 8]][int(rng.integers(8))], kind
    if kind == A.FLOATS:
        return [[], [math.nan], [math.inf, -math.inf], [1e38] * 9][int(rng.integers(4))], kind
    if kind == A.STRINGS:
        return [[], ["bogus"], [""] * 3][int(rng.integers(3))], kind
    tensors = [numpy_helper.from_array(np.array([], np.float32)), numpy_helper.from_array(np.array([math.nan], np.float32)),
               helper.make_tensor("t", TensorProto.STRING, [1], [b"x"]), numpy_helper.from_array(np.array(2**62, np.int64)),
               numpy_helper.from_array(np.zeros((2, 3), np.float16))]
    return tensors[int(rng.integers(len(tensors)))], A.TENSOR


def hostile_attributes(m: onnx.ModelProto, rng: Rng, ops: frozenset[str]) -> str:
    """An out-of-spec attribute on a node of the pass's pattern (``ops``): a wrong type, NaN or
    infinite floats, huge or negative ints, out-of-range axes, unknown enum strings, one
    removed (a required one missing) or given twice."""
    targets = [n for n in m.graph.node if n.op_type in ops] or list(m.graph.node)
    if not targets:
        return "no node"
    n = targets[int(rng.integers(len(targets)))]
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 17)
    declared = _schema_attributes(n, opset)
    present = {a.name: a for a in n.attribute}
    k = int(rng.integers(10))
    if k == 0 and present:
        name = list(present)[int(rng.integers(len(present)))]
        n.attribute.remove(present[name])
        return f"{n.op_type}: attribute {name} removed"
    if k == 1 and present:
        n.attribute.append(list(present.values())[int(rng.integers(len(present)))])
        return f"{n.op_type}: attribute {n.attribute[-1].name} given twice"
    names = sorted(set(declared) | set(present))
    if not names or rng.random() < 0.1:  # an attribute the op does not have
        names = [n for n in _CONTRIB if n not in present] or ["bogus"]
    name = names[int(rng.integers(len(names)))]
    kind = present[name].type if name in present else declared.get(name, onnx.AttributeProto.INT)
    value, kind = _value(kind, rng)
    if name in present:
        n.attribute.remove(present[name])
    n.attribute.append(helper.make_attribute(name, value, attr_type=kind))
    shown = repr(value)[:40] if not isinstance(value, onnx.TensorProto) else f"tensor {TensorProto.DataType.Name(value.data_type)}{list(value.dims)}"
    return f"{n.op_type}: {name} = {shown}"


def mutate_seed(seed: PassSeed, rng: Rng) -> tuple[bytes, str]:
    """The seed's model with one or two of the mutations above (out-of-spec attributes most often)."""
    m = onnx.load(str(seed.path))
    notes = []
    for _ in range(int(rng.integers(1, 3))):
        k = rng.choice(3, p=[0.3, 0.2, 0.5])
        notes.append(odd_outputs(m, rng) if k == 0 else long_dims(m, rng) if k == 1 else hostile_attributes(m, rng, seed.ops))
    return m.SerializeToString(), "; ".join(notes)
