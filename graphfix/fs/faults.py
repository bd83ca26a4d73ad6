"""Fault injection for the crash-consistency tests (``GRAPHFIX_TEST_*`` environment variables): a
commit can be logged, killed or slowed at a numbered step.
"""

from __future__ import annotations

import os
import signal
import time


# ------------------------------------------------------------------------------ fault injection
def _step(what: str) -> None:
    """One step of a commit. Tests make a run stop here: ``GRAPHFIX_TEST_STEPS=FILE`` appends each
    step's number and name to FILE, ``GRAPHFIX_TEST_KILL_AT=k`` SIGKILLs the process before step
    k, ``GRAPHFIX_TEST_PAUSE_AT=k:SECONDS`` sleeps there (a race made wide)."""
    _STEPS[0] += 1
    k = _STEPS[0]
    log = os.environ.get("GRAPHFIX_TEST_STEPS")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{k} {what}\n")
    if os.environ.get("GRAPHFIX_TEST_KILL_AT") == str(k):
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get("GRAPHFIX_TEST_PAUSE_AT", "")
    if pause.partition(":")[0] == str(k):
        time.sleep(float(pause.partition(":")[2]))


_STEPS = [0]
