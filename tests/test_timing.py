"""fedlam.timing: the slope-noise bound, round-robin timing, and the allocator setting."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fedlam import cost, timing


@pytest.mark.parametrize("sizes", [[400, 800, 1600], [1000, 2000, 4000, 8000], [5, 10, 20, 27]])
def test_slope_noise_bounds_every_perturbation_and_is_reached(sizes):
    rng = np.random.default_rng(0)
    x = np.array(sizes, dtype=float)
    t = 1e-3 * (x / x[0]) ** 1.5
    base = cost.loglog_slope(x, t)
    eps = 0.2
    bound = timing.slope_noise(x, eps)
    d = np.log1p(eps)
    worst = 0.0
    for _ in range(2000):
        e = rng.uniform(-d, d, x.size)
        worst = max(worst, abs(cost.loglog_slope(x, t * np.exp(e)) - base))
    assert worst <= bound + 1e-12
    # the bound is attained by the perturbation with the sign of the centred log-sizes
    lx = np.log(x) - np.log(x).mean()
    extreme = cost.loglog_slope(x, t * np.exp(d * np.sign(lx))) - base
    assert extreme == pytest.approx(bound, rel=1e-9)
    assert timing.slope_noise(x, 0.0) == 0.0


@pytest.mark.parametrize(
    ("sizes", "spread", "exc", "match"),
    [
        ([1.0], 0.1, ValueError, "at least 2"),
        ([[1.0, 2.0]], 0.1, ValueError, "1-D"),
        ([1.0, -2.0], 0.1, ValueError, "> 0"),
        ([3.0, 3.0], 0.1, ValueError, "not all be equal"),
        ([1.0, 2.0], -0.1, ValueError, r"spread must lie in \[0, inf\]"),
        ([1.0, 2.0], float("nan"), ValueError, "spread must be finite"),
        ([1.0, 2.0], True, TypeError, "spread must be a real number"),
        ([1.0, 2.0], "0.1", TypeError, "spread must be a real number"),
    ],
)
def test_slope_noise_rejects_bad_input(sizes, spread, exc, match):
    with pytest.raises(exc, match=match):
        timing.slope_noise(sizes, spread)


def test_time_interleaved_runs_round_robin_after_one_warm_up():
    order: list[int] = []
    calls = [lambda i=i: order.append(i) for i in range(3)]
    out = timing.time_interleaved(calls, repeat=4)
    assert order == [0, 1, 2] * 5
    assert len(out) == 3 and all(isinstance(t, timing.Timing) for t in out)
    assert all(t.best >= 0.0 and t.spread >= 0.0 for t in out)


def test_time_interleaved_orders_work_by_size():
    a = np.random.default_rng(1).standard_normal((300, 300))
    small, large = timing.time_interleaved([lambda: a[:50, :50] @ a[:50, :50], lambda: a @ a], 3)
    # 216 times the flops: the larger product cannot come out faster
    assert large.best > small.best


def _blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_time_once_runs_once_with_one_blas_thread():
    from threadpoolctl import threadpool_limits

    seen: list[set[int]] = []
    with threadpool_limits(limits=2, user_api="blas"):     # whatever the caller set
        t = timing.time_once(lambda: seen.append(_blas_threads()))
    assert len(seen) == 1 and seen[0] <= {1} and t >= 0.0
    with pytest.raises(TypeError, match="fn must be callable"):
        timing.time_once(3)


def test_time_interleaved_uses_one_blas_thread():
    from threadpoolctl import threadpool_limits

    seen: list[set[int]] = []
    with threadpool_limits(limits=2, user_api="blas"):
        timing.time_interleaved([lambda: seen.append(_blas_threads())], 2)
    assert len(seen) == 3 and all(s <= {1} for s in seen)


@pytest.mark.parametrize(
    ("calls", "repeat", "exc", "match"),
    [
        ([], 3, ValueError, "calls must not be empty"),
        ([print, 3], 3, TypeError, r"calls\[1\] must be callable"),
        ([print], 1, ValueError, "repeat must be >= 2"),
        ([print], True, TypeError, "repeat must be an int"),
        ([print], 2.0, TypeError, "repeat must be an int"),
    ],
)
def test_time_interleaved_rejects_bad_input(calls, repeat, exc, match):
    with pytest.raises(exc, match=match):
        timing.time_interleaved(calls, repeat)


_FAULTS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from fedlam import timing
    applied = timing.retain_freed_memory() if sys.argv[1] == "retain" else None
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):                      # warm-up: the heap grows to its peak once
        a = np.ones(2**20); b = a * 2.0; del a, b
    before = faults()
    for _ in range(50):                     # 8 MiB temporaries, freed after each use
        a = np.ones(2**20); b = a * 2.0; del a, b
    print(applied, faults() - before)
    """
)


def _faults(mode: str, env_threshold: bool) -> tuple[str, int]:
    import os

    env = dict(os.environ)
    if env_threshold:  # a fixed small threshold: glibc maps every large block afresh
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    applied, n = out.stdout.split()
    return applied, int(n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and minor-fault counts")
def test_retain_freed_memory_removes_page_faults_of_repeated_temporaries():
    # control: with every large block mapped afresh, each of the 50 rounds of two 8 MiB
    # temporaries faults on its fresh pages (hundreds of faults a round; the kernel may map
    # several pages per fault), so the measurement can see the effect
    applied, n_control = _faults("plain", env_threshold=True)
    assert applied == "None" and n_control > 50 * 100
    # the same process setting, overridden by retain_freed_memory: the pages are reused
    applied, n_retained = _faults("retain", env_threshold=True)
    assert applied == "True"
    assert n_retained < 50  # fewer than one fault a round
