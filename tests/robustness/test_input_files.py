"""Inputs that are not regular files (/dev/zero, a FIFO, a directory, a device) are refused in one
line, or read when something writes them; nothing hangs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.helpers.cli_runs import FIXTURE, ROOT, refused, run


def test_dev_zero_and_fifo_as_input_are_refused(tmp_path, capfd):
    refused(["/dev/zero", tmp_path / "out.onnx"], capfd, tmp_path, ("/dev/zero", "not a regular file"))
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    refused([fifo, tmp_path / "out.onnx"], capfd, tmp_path, ("pipe.onnx", "not a regular file"))
    src = tmp_path / "in.onnx"
    src.write_bytes(FIXTURE.read_bytes())
    refused([src, tmp_path / "out.onnx", "--load-inputs", "/dev/zero"], capfd, tmp_path, ("/dev/zero", "not a regular file"))
    refused([src, tmp_path / "out.onnx", "--load-inputs", fifo], capfd, tmp_path, "not a regular file")


def test_explain_of_a_directory_or_device_is_refused(tmp_path, capfd):
    refused(["explain", tmp_path], capfd, tmp_path, "is a directory")
    refused(["explain", "/dev/zero"], capfd, tmp_path, "not a regular file")


TRT_LOG = '[E] [TRT] ModelImporter.cpp:771: ERROR: builtin_op_importers.cpp:1234 In function importClip:\n' \
          '[8] Assertion failed: inputs.at(1).is_weights() && "Clip min value must be an initializer!"\n'


def test_explain_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "build.log"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "graphfix", "explain", fifo], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"graphfix: error: {fifo}: a FIFO with no writer: start the program that writes "
                                        "the log first, or pipe the log into 'graphfix explain -'"]


def test_explain_reads_a_fifo_that_has_a_writer(tmp_path, capfd):
    import threading

    fifo = tmp_path / "build.log"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as fh:  # blocks until explain opens the other end
            time.sleep(0.2)  # explain finds a writer that has not written yet
            fh.write(TRT_LOG)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    time.sleep(0.5)  # the writer is waiting in open() for a reader, as `trtexec > fifo &` would be
    try:
        rc, text, err = run(["explain", fifo], capfd)
    finally:
        writer.join(timeout=10)
    assert rc == 0 and "clip" in text.lower(), (text, err)
