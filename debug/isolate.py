"""Run a check in a forked child, so that whatever it does (a pass that mutates global state, loops
forever, recurses too deep or kills the interpreter) cannot touch the process that asked.

Forking is cheap here (a few ms, everything already imported), far cheaper than starting a fresh Python
for every reducer candidate. Where there is no fork (Windows), the check runs in this process.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable

Verdict = tuple[bool, str]

CAN_FORK = hasattr(os, "fork")


def run_isolated(check: Callable[[], Verdict], timeout: float | None = None) -> Verdict:
    """`check()` run in a child process: its verdict, or (False, why) when it died or ran too long."""
    if not CAN_FORK:
        return check()
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no output of its own, only the verdict down the pipe
        os.close(r)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            ok, why = check()
            payload = ("1" if ok else "0") + why
        except BaseException as e:  # noqa: BLE001 - everything must end in a verdict
            payload = f"0the check failed: {type(e).__name__}: {e}"
        try:
            os.write(w, payload.encode("utf-8", "replace"))
        finally:
            os._exit(0)
    os.close(w)
    chunks: list[bytes] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            data = os.read(r, 65536)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return False, f"it ran past the {timeout:g} s timeout"
    if not chunks:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return False, f"the check died{f' with signal {sig}' if sig else ''}"
    payload = b"".join(chunks).decode("utf-8", "replace")
    return payload[:1] == "1", payload[1:]
