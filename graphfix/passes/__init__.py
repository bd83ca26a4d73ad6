"""The pass registry: :data:`PIPELINE`, every pass module in the order the pipeline runs them.

Adding a pass is a module defining ``PASS`` plus one line in ``PIPELINE`` (where it must run
relative to the others, with the reason next to it when there is one). A pass module imports
no other pass module: what passes share lives in the ``_``-prefixed helper modules here.
Your own passes join a run by name: :func:`insert` (docs/writing-a-pass.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import cache
from types import ModuleType

from graphfix.errors import GraphfixError
from graphfix.graph.build import Skip
from graphfix.passes import (
    activation_decompose,
    aten_fallback,
    attention_decompose,
    bool_gather_cast,
    castlike_to_cast,
    causalconv_decompose,
    col2im_to_convtranspose,
    contrib_activation_lower,
    contrib_attention_lower,
    contrib_matmul_lower,
    contrib_norm_lower,
    contrib_rotary_lower,
    cumprod_decompose,
    cumsum_decompose,
    deformconv_decompose,
    dequantize_dynamic,
    dft_decompose,
    einsum_to_matmul,
    fold_clip,
    fold_weights,
    gathernd_decompose,
    gelu_decompose,
    gridsample_decompose,
    groupnorm_decompose,
    if_inline,
    if_rank_unify,
    int_argmax_topk,
    isinf_isnan_decompose,
    layernorm_decompose,
    mod_decompose,
    onehot_decompose,
    pad_to_concat,
    qdq_uint8_to_int8,
    qoperator_to_qdq,
    range_bound,
    range_inputs,
    reduce_axes_input,
    requantize_symmetric,
    resize_cubic,
    resize_nearest_mode,
    rmsnorm_decompose,
    rotary_embedding_decompose,
    round_sign_decompose,
    scan_normalize,
    scatterelements_decompose,
    scatternd_cast,
    scatternd_decompose,
    shape_tensor_ops,
    stft_decompose,
    swiglu_decompose,
    swish_decompose,
    tensorscatter_decompose,
    topk_constant_k,
    trilu_decompose,
    xor_decompose,
)
from graphfix.passes.base import Context, Finding, Pass, PassResult

__all__ = ["OPT_IN", "PIPELINE", "Context", "Finding", "Pass", "PassResult", "Skip", "all_passes", "get", "insert", "opt_in",
           "select"]

#: Every pass module, in the order the pipeline runs their passes (``graphfix passes`` lists them
#: so, docs/passes.md too). A pass that adds nodes another pass rewrites is run again on them in a
#: later round, so an order here is a constraint only where a comment says why.
PIPELINE: tuple[ModuleType, ...] = (
    aten_fallback,
    contrib_norm_lower,  # onnxruntime's fused ops first: what they lower to meets the release's passes
    contrib_activation_lower,
    contrib_matmul_lower,
    contrib_attention_lower,
    contrib_rotary_lower,
    qoperator_to_qdq,
    qdq_uint8_to_int8,  # after qoperator-to-qdq, whose Q/DQ keep the QOperator model's UINT8 zero points
    if_inline,
    if_rank_unify,  # after if-inline (which removes an If whose condition folds), before passes that rewrite its readers
    scan_normalize,
    fold_weights,
    topk_constant_k,  # after fold-weights, which folds a K that is constant
    shape_tensor_ops,
    fold_clip,
    gathernd_decompose,  # before bool-gather-cast, which casts the BOOL data of the Gather this writes
    scatternd_decompose,  # before scatternd-cast: this one owns the runtime-index reductions
    scatterelements_decompose,
    gridsample_decompose,
    deformconv_decompose,
    col2im_to_convtranspose,
    resize_cubic,
    resize_nearest_mode,
    scatternd_cast,
    bool_gather_cast,
    layernorm_decompose,
    groupnorm_decompose,
    gelu_decompose,
    activation_decompose,
    isinf_isnan_decompose,
    round_sign_decompose,
    attention_decompose,
    rmsnorm_decompose,
    rotary_embedding_decompose,
    pad_to_concat,
    tensorscatter_decompose,
    mod_decompose,
    xor_decompose,
    trilu_decompose,
    onehot_decompose,
    castlike_to_cast,
    swish_decompose,
    swiglu_decompose,
    cumprod_decompose,
    einsum_to_matmul,
    causalconv_decompose,
    stft_decompose,
    dft_decompose,
    cumsum_decompose,  # before range-inputs: its arange_like rewrite creates a Range
    reduce_axes_input,  # before int-argmax-topk, which makes the TopK this writes for integer ReduceMax FLOAT
    int_argmax_topk,  # after topk-constant-k, whose padding keeps the data provably exact
    range_bound,  # before range-inputs, which folds the constant-input Range this may build
    range_inputs,  # last: after the passes that may create Range (cumsum-decompose's arange_like)
)


#: Rewrites that change results by design (``Pass.exact`` False), kept out of :data:`PIPELINE` so
#: that no pass list, ``all`` or ``auto`` can run them: each has its own run option, and runs as a
#: whole-model step whose outputs are compared with the model it started from and judged against a
#: documented bound, in quantization steps (graphfix.pipeline.inexact). Kept apart rather than a
#: flag the pipeline filters on: region verification accepts a rewrite only within float rounding,
#: and widening it for one pass would widen it for the regions beside it. The option's name is
#: the pass's (``requantize-symmetric`` <- ``--requantize-symmetric``).
OPT_IN: tuple[ModuleType, ...] = (
    dequantize_dynamic,  # before the passes: what it writes (MatMul, Conv, LSTM) meets the release's passes
    requantize_symmetric,  # after the passes: qoperator-to-qdq's and qdq-uint8-to-int8's Q/DQ are what it reads
)


def opt_in(name: str) -> Pass:
    """The opt-in (inexact) pass of that name."""
    for module in OPT_IN:
        if module.PASS.name == name:
            return module.PASS
    raise KeyError(name)


@cache
def all_passes() -> tuple[Pass, ...]:
    """The passes of :data:`PIPELINE`, in its order."""
    found = tuple(module.PASS for module in PIPELINE)
    if not all(p.exact for p in found):
        raise RuntimeError(f"inexact passes belong in OPT_IN: {[p.name for p in found if not p.exact]}")
    names = [p.name for p in found]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"duplicate pass names: {sorted(dupes)}")
    return found


def get(name: str) -> Pass:
    for p in all_passes():
        if p.name == name:
            return p
    if name in {m.PASS.name for m in OPT_IN}:
        raise GraphfixError(f"{name} changes results (not exact): it runs only with --{name} (API {name.replace('-', '_')}=True), "
                            "never from a pass list")
    raise GraphfixError(f"unknown pass {name!r}; {_hint(name, [p.name for p in all_passes()])}")


def _hint(name: str, names: list[str]) -> str:
    spelled = name.strip().lower().replace("_", "-")  # a module name or a shouting shell script
    close = [spelled] if spelled in names else difflib.get_close_matches(spelled, names, n=2, cutoff=0.6)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else f"'graphfix passes' lists the {len(names)} passes"


def select(passes: str | list[str] | tuple[str, ...] = "all", skip: list[str] | tuple[str, ...] = ()) -> list[Pass]:
    """Resolve a user's pass list (``"all"``, ``"a,b"`` or a list) into pipeline order."""
    names = [n.strip() for n in passes.split(",") if n.strip()] if isinstance(passes, str) else list(passes)
    chosen = list(all_passes()) if names in (["all"], []) else [get(n) for n in names]
    skipped = {get(n).name for n in skip}
    chosen_names = {p.name for p in chosen} - skipped
    return [p for p in all_passes() if p.name in chosen_names]


def insert(extra: Pass, *, before: str | None = None, after: str | None = None,
           passes: Iterable[Pass | str] | None = None) -> list[Pass]:
    """``passes`` (default: the whole pipeline; names are looked up) with your own pass ``extra``
    placed just ``before`` or just ``after`` the pass of that name. Give the result to
    ``graphfix.fix(model, passes=...)``, which runs a list holding ``Pass`` objects in its order;
    chain calls to place several. An unknown name, neither or both of before/after, or a pass
    name already in the list is a GraphfixError."""
    if not isinstance(extra, Pass):
        raise GraphfixError(f"insert: expected a Pass, got {type(extra).__name__}")
    if (before is None) == (after is None):
        raise GraphfixError("insert: give exactly one of before= or after= (a pass name)")
    chosen = list(all_passes()) if passes is None else [p if isinstance(p, Pass) else get(p) for p in passes]
    names = [p.name for p in chosen]
    if extra.name in names:
        raise GraphfixError(f"insert: a pass named {extra.name!r} is already in the pipeline")
    anchor = before if before is not None else after
    if anchor not in names:
        raise GraphfixError(f"insert: unknown pass {anchor!r}; {_hint(str(anchor), names)}")
    at = names.index(anchor) + (after is not None)
    return [*chosen[:at], extra, *chosen[at:]]

