"""Runs kept for later wait in a temporary file (graphfix.verify.spill): the same values, read back
from the file; small arrays, strings and a temp folder that cannot be written stay in memory."""

from __future__ import annotations

import mmap
import tempfile

import numpy as np
from polygraphy.comparator import RunResults

from graphfix.verify import compare, spill


def _run(**arrays) -> RunResults:
    return RunResults([("r", [compare.iteration_result(arrays, 0.5, "r")])])


def test_big_arrays_are_read_back_from_a_file_and_the_rest_is_copied():
    big = np.arange(spill.SPILL_ABOVE // 4 + 3, dtype=np.float32).reshape(-1, 1)
    small, text = np.ones(3, np.int64), np.array(["a", "b"], object)
    strided = np.arange(2 * big.size, dtype=np.float32)[::2]
    it = spill.spilled(_run(big=big, strided=strided, small=small, text=text))[0][1][0]
    assert isinstance(it["big"].base, mmap.mmap) and isinstance(it["strided"].base, mmap.mmap)
    assert np.array_equal(it["big"], big) and np.array_equal(it["strided"], strided) and it["big"].shape == big.shape
    assert np.array_equal(it["small"], small) and it["small"] is not small and list(it["text"]) == ["a", "b"]
    assert it.runtime == 0.5 and it.runner_name == "r"


def test_only_the_names_asked_for_are_kept():
    assert list(spill.spilled(_run(a=np.ones(2), b=np.zeros(2)), ["b", "missing"])[0][1][0]) == ["b"]


def test_released_pages_come_back_from_the_file():
    big = np.random.default_rng(0).standard_normal(spill.SPILL_ABOVE // 8 * 3)
    spilled = spill.spilled(_run(y=big))
    assert float(spilled[0][1][0]["y"].sum()) == float(big.sum())
    spill.release(spilled)
    assert np.array_equal(spilled[0][1][0]["y"], big)


def test_no_writable_temp_folder_keeps_them_in_memory(monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/proc")
    big = np.arange(spill.SPILL_ABOVE, dtype=np.uint8)
    it = spill.spilled(_run(y=big))[0][1][0]
    assert not isinstance(it["y"].base, mmap.mmap) and np.array_equal(it["y"], big)
