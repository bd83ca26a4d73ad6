"""Building the TensorRT engine and comparing it with onnxruntime, through polygraphy's public API.

TensorRT is optional (``pip install "graphfix[trt]"``; it needs an NVIDIA GPU and NVIDIA's package
index). ``tensorrt`` is imported only when an engine is built; without it the build fails with
one clear line. The equivalent ``trtexec`` and ``polygraphy run`` command lines are always
available, since many users build with those.
"""

from __future__ import annotations

import importlib.util
import shlex
from typing import Any

import numpy as np

from graphfix.errors import GraphfixError
from graphfix.settings.syntax import parse_input_shapes
from graphfix.verify.compare import compare
from graphfix.verify.inputs import Feeds, quiet_polygraphy

ProfileShapes = dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
MISSING = ("TensorRT is not installed; install graphfix[trt] (pip install 'graphfix[trt]') on a machine with an NVIDIA GPU, "
           "or build with the trtexec / polygraphy command lines graphfix prints")


def tensorrt_available() -> bool:
    return importlib.util.find_spec("tensorrt") is not None


def parse_profile_shapes(min_items: list[str] | None, opt_items: list[str] | None, max_items: list[str] | None) -> ProfileShapes:
    """trtexec-style ``--trt-min-shapes x:1x3x224x224`` (and opt, max) into one profile per input."""
    lo, opt, hi = (parse_input_shapes(items, f"--trt-{which}-shapes")
                   for which, items in (("min", min_items), ("opt", opt_items), ("max", max_items)))
    if not (lo or opt or hi):
        return {}
    if not (set(lo) == set(opt) == set(hi)):
        raise GraphfixError("--trt-min-shapes, --trt-opt-shapes and --trt-max-shapes must name the same inputs")
    shapes: ProfileShapes = {}
    for name in lo:
        if not len(lo[name]) == len(opt[name]) == len(hi[name]):
            raise GraphfixError(f"min/opt/max shapes of {name} have different ranks")
        if any(a > b or b > c for a, b, c in zip(lo[name], opt[name], hi[name], strict=True)):
            raise GraphfixError(f"shapes of {name} must satisfy min <= opt <= max in every dim")
        shapes[name] = (lo[name], opt[name], hi[name])
    return shapes


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def engine_tolerance(fp16: bool) -> float:
    """atol = rtol for TensorRT against onnxruntime: kernels and TF32 differ from onnxruntime's
    CPU results by more than graphfix's own 1e-5 between two onnxruntime runs."""
    return 1e-2 if fp16 else 1e-3


def command_lines(onnx_path: str, engine_path: str, shapes: ProfileShapes | None = None, fp16: bool = False,
                  reference: tuple[str, str] | None = None) -> dict[str, str]:
    """The ``trtexec`` and ``polygraphy run`` commands that build (and compare) the same engine.

    ``reference``: graphfix's polygraphy files (inputs, outputs): the polygraphy line then runs
    TensorRT on those inputs and compares with graphfix's onnxruntime results, on a GPU box with no
    onnxruntime of its own. Without them it compares with onnxruntime there, on random inputs of
    the opt shapes (polygraphy would otherwise make every dynamic dim 1)."""
    shapes = shapes or {}
    trtexec = ["trtexec", f"--onnx={onnx_path}", f"--saveEngine={engine_path}"]
    poly = ["polygraphy", "run", onnx_path, "--trt", *([] if reference else ["--onnxrt"]), "--save-engine", engine_path]
    if shapes:
        for flag, k in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
            trtexec.append(f"{flag}=" + ",".join(f"{n}:{_dims(s[k])}" for n, s in shapes.items()))
        flags = [("--trt-min-shapes", 0), ("--trt-opt-shapes", 1), ("--trt-max-shapes", 2)]
        for flag, k in flags + ([] if reference else [("--input-shapes", 1)]):
            poly += [flag, *(f"{n}:[{','.join(map(str, s[k]))}]" for n, s in shapes.items())]
    if fp16:
        trtexec.append("--fp16")
        poly.append("--fp16")
    if reference:
        tol = str(engine_tolerance(fp16))
        poly += ["--load-inputs", reference[0], "--load-outputs", reference[1], "--atol", tol, "--rtol", tol]
    return {"trtexec": shlex.join(trtexec), "polygraphy": shlex.join(poly)}


def build_and_compare(onnx_path: str, engine_path: str, feeds: Feeds, reference: Any, shapes: ProfileShapes | None = None,
                      fp16: bool = False, atol: float = 1e-3, rtol: float = 1e-3) -> dict[str, Any]:
    """Build with polygraphy's loaders, save the engine, run it on ``feeds`` and compare with the
    onnxruntime RunResults ``reference`` of the same model (fp16 needs looser tolerances)."""
    if not tensorrt_available():
        raise GraphfixError(MISSING)
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineFromNetwork,
        NetworkFromOnnxPath,
        Profile,
        SaveEngine,
        TrtRunner,
    )
    from polygraphy.comparator import Comparator

    profiles = []
    if shapes:
        profile = Profile()
        for name, (lo, opt, hi) in shapes.items():
            profile.add(name, lo, opt, hi)
        profiles = [profile]
    build = SaveEngine(EngineFromNetwork(NetworkFromOnnxPath(onnx_path), config=CreateConfig(fp16=fp16, profiles=profiles)), path=engine_path)
    with quiet_polygraphy():
        results = Comparator.run([TrtRunner(build, name="tensorrt")], data_loader=feeds)
    diffs = compare(reference, results, atol, rtol)
    return {
        "engine": engine_path, "fp16": fp16, "atol": atol, "rtol": rtol,
        "passed": all(d.passed for d in diffs.values()),
        "outputs": {k: d.as_dict() for k, d in diffs.items()},
        "max_abs": float(np.max([d.max_abs for d in diffs.values()])) if diffs else 0.0,
    }
