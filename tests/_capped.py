"""Run one call in a forked child process with a time and an address-space cap.

Used by the bad-input tests: a call that would hang or allocate gigabytes is stopped (and
reported as ``"timeout"`` or as the ``MemoryError`` it raises under the cap) instead of
taking the test run down. The child inherits everything the test built before the fork, so
the call is any zero-argument callable (a lambda); only a short description of the outcome
crosses the pipe.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from collections.abc import Callable
from typing import Any, NamedTuple

#: memory the child may add to the parent's address space (bytes)
DEFAULT_EXTRA_BYTES = 1 * 2**30


class Outcome(NamedTuple):
    kind: str  # "ok", "raise", "timeout" or "crash"
    exc_type: str = ""
    message: str = ""
    value: str = ""

    def __str__(self) -> str:
        if self.kind == "raise":
            return f"raised {self.exc_type}: {self.message}"
        if self.kind == "ok":
            return f"returned {self.value}"
        return self.kind


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def run_capped(fn: Callable[[], Any], timeout: float = 20.0, extra_bytes: int = DEFAULT_EXTRA_BYTES) -> Outcome:
    """Call ``fn()`` in a forked child limited to ``timeout`` seconds and ``extra_bytes`` of
    additional address space; kill it on timeout."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    limit = _address_space() + int(extra_bytes)

    def child() -> None:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                out = fn()
                send.send(Outcome("ok", value=repr(out)[:300]))
            except BaseException as exc:
                send.send(Outcome("raise", type(exc).__name__, str(exc)[:2000]))
        finally:
            os._exit(0)

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout):
            try:
                result = recv.recv()
            except EOFError:
                result = Outcome("crash")
        else:
            result = Outcome("timeout")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        recv.close()
    return result


def assert_refused(fn: Callable[[], Any], *names: str, timeout: float = 20.0,
                   extra_bytes: int = DEFAULT_EXTRA_BYTES) -> Outcome:
    """``fn()`` raises ValueError or TypeError whose message contains every one of ``names``."""
    out = run_capped(fn, timeout=timeout, extra_bytes=extra_bytes)
    assert out.kind == "raise" and out.exc_type in ("ValueError", "TypeError"), str(out)
    for name in names:
        assert name in out.message, f"message does not name {name!r}: {out}"
    return out
