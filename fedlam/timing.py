"""Processor-time measurements whose scaling can be asserted (the measurements of {ref}`sec-cost`).

A fitted scaling exponent is only as good as the times it is fitted to. Three effects that are
not the algorithm's work distort small timings, and each has a remedy here:

* **other jobs on the machine**: measure the processor time of this process
  (``time.process_time``) rather than wall-clock time, with one BLAS thread (with several,
  processor time also counts threads spin-waiting for work);
* **drift while measuring** (frequency scaling, a neighbour's load coming and going): time the
  sizes round-robin, so every size sees the same conditions, and keep the best of the repeats;
* **the allocator**: glibc's ``malloc`` serves large blocks with fresh ``mmap`` pages and adapts
  its threshold to the history of the process, so the same call at the same size sometimes
  pays one page fault per 4 KiB of its temporaries and sometimes none (in the LAM loop of
  {ref}`sec-cost` the faults can double the time of a size, in one history and not in
  another). :func:`retain_freed_memory` fixes the thresholds so that freed memory stays in
  the process and the repeated calls reuse warm pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from fedlam._validation import check_in_range, check_positive_int

__all__ = ["Timing", "retain_freed_memory", "slope_noise", "time_interleaved", "time_once"]

# glibc's mallopt parameters (malloc.h) and its largest mmap threshold on 64-bit systems
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


class Timing(NamedTuple):
    """Best processor time of a call and the relative spread of its repeats."""

    best: float
    """Smallest processor time over the repeats, in seconds."""
    spread: float
    """``slowest / best - 1`` over the repeats (0 when the best time is 0)."""


def retain_freed_memory() -> bool:
    """Make glibc keep freed memory in the process, so repeated calls reuse warm pages.

    Sets ``M_MMAP_THRESHOLD`` to its largest value (32 MiB: smaller blocks come from the heap)
    and ``M_TRIM_THRESHOLD`` to 1 GiB (the heap is not returned to the system). Setting them
    also switches off glibc's history-dependent adjustment of the thresholds. The setting
    holds for the rest of the process and costs at most the memory the process already used
    at its peak. Blocks of 32 MiB and more are still mapped afresh on every call, the same
    way at every size.

    Returns
    -------
    bool
        True where it took effect (Linux with glibc); False elsewhere, where nothing is changed.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    return bool(ok and mallopt(_M_TRIM_THRESHOLD, 1 << 30) == 1)


def _process_time(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def time_once(fn: Callable[[], object]) -> float:
    """Processor time of one call with one BLAS thread, without warm-up.

    For a call too expensive to repeat; its time is then an upper estimate of what
    :func:`time_interleaved` would report.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with threadpool_limits(limits=1, user_api="blas"):
        return _process_time(fn)


def time_interleaved(calls: Sequence[Callable[[], object]], repeat: int = 5) -> list[Timing]:
    """Best processor time of each call, measured round-robin with one BLAS thread.

    Every call runs once as a warm-up (first-touch page faults, caches, lazy imports), then
    ``repeat`` rounds run each call once in the given order, so that a slow spell of the
    machine falls on every call alike.

    Parameters
    ----------
    calls : sequence of callables without arguments
        Typically one call per problem size.
    repeat : int
        Timed rounds, ``>= 2``.

    Returns
    -------
    list of Timing
        One per call, in order.
    """
    repeat = check_positive_int(repeat, "repeat", minimum=2)   # the spread needs two runs
    calls = list(calls)
    if not calls:
        raise ValueError("calls must not be empty")
    for i, fn in enumerate(calls):
        if not callable(fn):
            raise TypeError(f"calls[{i}] must be callable, got {type(fn).__name__}")
    times: list[list[float]] = [[] for _ in calls]
    with threadpool_limits(limits=1, user_api="blas"):
        for fn in calls:
            fn()
        for _ in range(repeat):
            for fn, ts in zip(calls, times, strict=True):
                ts.append(_process_time(fn))
    out = []
    for ts in times:
        best, worst = min(ts), max(ts)
        out.append(Timing(best, worst / best - 1.0 if best > 0 else 0.0))
    return out


def slope_noise(sizes: npt.ArrayLike, spread: float) -> float:
    """Largest change of a least-squares log-log slope when each time is off by a factor up to ``1 + spread``.

    With ``l_i = log x_i - mean(log x)`` the fitted slope is ``sum l_i y_i / sum l_i^2``; a change
    ``e_i`` of each ``y_i = log t_i`` with ``|e_i| <= log(1 + spread)`` moves it by at most
    ``log(1 + spread) * sum |l_i| / sum l_i^2``, reached at ``e_i = ±log(1 + spread)`` with the
    sign of ``l_i``. Derived in {ref}`sec-cost`.

    Parameters
    ----------
    sizes : array_like of positive floats, not all equal
    spread : float
        Relative timing error bound, ``>= 0`` (e.g. the largest :attr:`Timing.spread`).

    Returns
    -------
    float
    """
    x = np.asarray(sizes, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"sizes must be 1-D with at least 2 entries, got shape {x.shape}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("sizes must be finite and > 0")
    spread = check_in_range(spread, "spread", 0.0, None)
    lx = np.log(x) - np.log(x).mean()
    den = float((lx**2).sum())
    if den == 0.0:
        raise ValueError("sizes must not all be equal")
    return float(np.log1p(spread) * np.abs(lx).sum() / den)
