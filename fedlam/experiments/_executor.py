"""Spreading an experiment's independent seeds over a ``concurrent.futures`` executor.

Every experiment draws its per-seed integer seeds up front (``fedlam.experiments._common.seed_pairs``)
and then runs one independent task per seed. :func:`map_seeds` runs those tasks serially, on a
``ProcessPoolExecutor``, or on a ``dask.distributed`` cluster (``Client.get_executor()``), and
returns their results in task order -- so a result never depends on the executor, only on the
seeds.

``executor=None`` means "serial", unless the environment variable ``FEDLAM_SCHEDULER`` holds the
address of a running Dask scheduler (``tcp://HOST:PORT``): then the tasks go to that cluster.
``python -m fedlam.reproduce --scheduler local|ADDRESS`` sets it for the notebook kernels it
starts, so the committed notebooks need no change to run on a cluster.

Task functions must be importable module-level functions (they are pickled by reference), and
their arguments plain data (parameters dataclasses, ints, arrays).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from typing import Any

from fedlam._validation import _describe

__all__ = ["SCHEDULER_ENV", "check_executor", "resolve_executor", "map_seeds", "dask_executor"]

#: environment variable holding a Dask scheduler address used when ``executor=None``
SCHEDULER_ENV = "FEDLAM_SCHEDULER"

_CLIENTS: dict[str, Any] = {}


def check_executor(executor: Any, name: str = "executor") -> Executor | None:
    """``None`` or a :class:`concurrent.futures.Executor` (anything with ``submit`` and ``map``)."""
    if executor is None or isinstance(executor, Executor):
        return executor
    if callable(getattr(executor, "submit", None)) and callable(getattr(executor, "map", None)):
        return executor  # duck-typed executors (e.g. dask's ClientExecutor before 2024)
    raise TypeError(f"{name} must be None or a concurrent.futures.Executor, got {_describe(executor)}")


def dask_executor(address: str, timeout: float = 30.0) -> Executor:
    """A ``concurrent.futures`` executor on the Dask scheduler at ``address`` (cached per process).

    Raises
    ------
    ImportError
        ``dask.distributed`` is not installed (``pip install 'fedlam[cluster]'``).
    OSError
        No scheduler answers at ``address`` within ``timeout`` seconds.
    """
    if not isinstance(address, str) or not address:
        raise TypeError(f"address must be a non-empty string, got {_describe(address)}")
    client = _CLIENTS.get(address)
    if client is None or client.status not in ("running", "connecting"):
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("a Dask scheduler needs dask.distributed: pip install 'fedlam[cluster]'") from exc
        client = Client(address, timeout=timeout, set_as_default=False)
        _CLIENTS[address] = client
    return client.get_executor()


@atexit.register
def _close_clients() -> None:  # pragma: no cover - runs at interpreter exit
    for c in list(_CLIENTS.values()):
        try:
            c.close()
        except Exception:
            pass
    _CLIENTS.clear()


def resolve_executor(executor: Any) -> Executor | None:
    """The executor to use: ``executor`` itself, or the ``FEDLAM_SCHEDULER`` cluster, or None."""
    executor = check_executor(executor)
    if executor is not None:
        return executor
    address = os.environ.get(SCHEDULER_ENV, "").strip()
    return dask_executor(address) if address else None


def map_seeds(fn: Callable[..., Any], tasks: Iterable[Sequence[Any]], executor: Any = None) -> list:
    """Run ``fn(*task)`` for every task and return the results in task order.

    Parameters
    ----------
    fn : callable
        A module-level function (picklable by reference).
    tasks : iterable of tuple
        Positional arguments of each call.
    executor : concurrent.futures.Executor or None
        Where to run (see the module notes; None = serial or ``FEDLAM_SCHEDULER``).

    Returns
    -------
    list
        ``[fn(*tasks[0]), fn(*tasks[1]), ...]``, whatever the executor.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {_describe(fn)}")
    tasks = [tuple(t) for t in tasks]
    ex = resolve_executor(executor)
    if ex is None or len(tasks) <= 1:
        return [fn(*t) for t in tasks]
    futures = [ex.submit(fn, *t) for t in tasks]
    return [f.result() for f in futures]
