"""Regenerate every experiment of the book: ``python -m fedlam.reproduce``.

Runs the experiment notebooks (``book/experiments/*.ipynb``) through papermill with the chosen
preset injected into their ``parameters`` cell, in parallel worker processes, with a progress bar,
and writes under ``--out DIR``::

    DIR/summary.json                 what ran, preset, per-notebook status, wall time and
                                     load average (rewritten after every notebook: an
                                     interrupted run keeps its times)
    DIR/<name>/<name>.ipynb          the executed notebook
    DIR/<name>/*.png, *.pdf          every figure the notebook draws
    DIR/<name>/results.json          the machine-readable summary of the run (``to_dict()``)

Usage::

    python -m fedlam.reproduce [--preset book|paper|full] [--only NAME ...] [--jobs N]
                               [--out DIR] [--param FIELD=VALUE ...] [--notebooks DIR]
                               [--scheduler local|ADDRESS] [--workers N]

Presets (:data:`PRESET_HELP`): ``book`` runs every notebook at the book's small sizes (the committed
outputs); ``paper`` runs the paper's own experiments (:data:`PAPER_NOTEBOOKS`) at the paper's sizes
and seeds and nothing more (the cells of those notebooks that go beyond the paper keep the book's
sizes); ``full`` runs every notebook at the paper's scale, our attack x defence grid, trade-off
sweep, baselines, privacy and cross-device experiments included. A notebook outside the paper runs
at ``--preset paper`` only when named with ``--only`` (then at its paper-scale preset).

Every argument is checked before any notebook starts (sizes are bounded: :data:`SIZE_LIMITS`),
and ``--out`` is created and probed for writing before any work.

``--scheduler`` spreads every experiment's seeds over a ``dask.distributed`` cluster:
``local`` starts a ``LocalCluster`` on 127.0.0.1 with ``--workers`` single-threaded worker
processes for the duration of the command; ``tcp://HOST:PORT`` uses a running scheduler (start
one with ``dask scheduler`` and ``dask worker tcp://HOST:PORT`` on each machine; the same fedlam
must be installed on the scheduler's machine and on every worker, because the scheduler unpickles
the tasks). The notebook kernels find it through ``FEDLAM_SCHEDULER``
(:mod:`fedlam.experiments._executor`); results do not depend on where the seeds ran. The experiments are described in
{ref}`sec-exp-bbp` to {ref}`sec-exp-baselines`.

The notebooks call :func:`save_figure` and :func:`save_results` from this module; both do nothing
when ``out_dir`` is ``None`` (the book build), so the committed notebooks write no files.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

__all__ = [
    "NOTEBOOKS",
    "PRESET_NAMES",
    "default_notebook_dir",
    "parse_args",
    "resolve_names",
    "run_notebook",
    "main",
    "save_figure",
    "save_results",
    "SIZE_LIMITS",
    "check_size_limits",
    "start_local_cluster",
    "PAPER_NOTEBOOKS",
    "PRESET_HELP",
]

#: notebook stem -> experiment module (under fedlam.experiments) whose parameters it accepts
NOTEBOOKS: dict[str, str] = {
    "bbp_panel": "bbp",
    "adversarial": "adversarial",
    "drift": "drift",
    "novelty": "novelty",
    "structured": "structured",
    "baselines": "baselines",
    "privacy": "privacy",
    "cross_device": "cross_device",
}
ALIASES: dict[str, str] = {"bbp": "bbp_panel"}
PRESET_NAMES: tuple[str, ...] = ("book", "paper", "full")
#: the notebooks that hold an experiment of the paper (what ``--preset paper`` runs by default)
PAPER_NOTEBOOKS: tuple[str, ...] = ("bbp_panel", "adversarial", "drift", "novelty", "structured")
#: what each preset runs, its size and its time (shown by ``--help``)
PRESET_HELP: dict[str, str] = {
    "book": "every notebook at the book's small sizes (the committed outputs)",
    "paper": "the paper's own experiments at the paper's sizes and seeds, nothing more: BBP panel (N = 400, "
             "50 trials), one noise client among four good ones (N = 1000, M = 800, T = 10, 20 seeds, the "
             "paper's rule and ours), exposure drift (N = 400, T = 30, 10 seeds), novelty (N = 400, T = 24, "
             "30 seeds), silhouettes (N = 784, T = 12, 10 seeds); measured with --scheduler local --workers 2 "
             "on two idle cores: 593 s (9.9 min) wall, 1086 s of CPU (benchmarks/README.md)",
    "full": "every notebook at the paper's scale, our additions included: the attack x defence grid "
            "(7 attacks x 5 defences x 2 rules x 20 seeds = 1400 federations at N = 1000) and the "
            "defences' trade-off sweep (20 seeds, about 960 federations at N = 1000), baselines (7 "
            "scenarios x 8 methods x 10 seeds and the leakage curve), privacy (N = 1000) and cross-device "
            "(up to 1000 clients); estimated, not measured end to end: over 1.5 hours on two idle cores (the "
            "grid and sweep alone are about 2360 federations at N = 1000, 3-5 s of CPU each)",
}

#: seconds to wait for a remote Dask scheduler to answer before giving up
CONNECT_TIMEOUT = 10.0

#: upper bounds on size parameters given with ``--param`` (a value above them would allocate
#: tens of GB or run for days on a workstation; the paper presets stay far below)
SIZE_LIMITS: dict[str, int] = {
    "seeds": 1000,
    "N": 20_000,
    "M": 1_000_000,
    "Ms": 1_000_000,
    "M_total": 10_000_000,
    "T": 10_000,
    "L": 1_000,
    "n_good": 1_000,
    "K": 1_000,
    "K_old": 1_000,
    "K_new": 1_000,
    "n_top": 1_000,
}


def save_figure(fig: Any, out_dir: str | os.PathLike | None, name: str) -> None:
    """Save ``fig`` as ``out_dir/name.png`` and ``out_dir/name.pdf``; no-op if ``out_dir`` is None.

    Uses :func:`fedlam.plotting.save_figure` (white background, no timestamps in the PDF).
    """
    if out_dir is None:
        return
    from fedlam.plotting import save_figure as _save

    _save(fig, Path(out_dir) / name, formats=("png", "pdf"))


def save_results(obj: Any, out_dir: str | os.PathLike | None, name: str = "results") -> None:
    """Write ``obj`` (a result object with ``to_dict()`` or any JSON-able value) to JSON."""
    if out_dir is None:
        return
    from fedlam.experiments._common import write_json

    payload = obj.to_dict() if hasattr(obj, "to_dict") else obj
    write_json(payload, Path(out_dir) / f"{name}.json")


def default_notebook_dir() -> Path:
    """``book/experiments`` of the source checkout this package was imported from."""
    return Path(__file__).resolve().parent.parent / "book" / "experiments"


def resolve_names(only: Sequence[str] | None, preset: str = "book") -> list[str]:
    """Map ``--only`` names (notebook stems or aliases) to notebook stems, in canonical order.

    Without ``--only``: every notebook, except at ``preset="paper"``, which selects the notebooks
    of the paper's own experiments (:data:`PAPER_NOTEBOOKS`).
    """
    if not only:
        return list(PAPER_NOTEBOOKS) if preset == "paper" else list(NOTEBOOKS)
    wanted = []
    for n in only:
        stem = ALIASES.get(n, n)
        if stem not in NOTEBOOKS:
            raise ValueError(
                f"--only: unknown experiment {n!r}; choose from {sorted(NOTEBOOKS) + sorted(ALIASES)}"
            )
        wanted.append(stem)
    return [n for n in NOTEBOOKS if n in wanted]


def _parse_param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ValueError(f"--param must look like FIELD=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key.isidentifier():
        raise ValueError(f"--param field name must be an identifier, got {key!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fedlam.reproduce",
        description="Re-run the fedlam experiment notebooks with papermill and collect figures "
        "(PNG, PDF), executed notebooks and JSON results.",
    )
    p.add_argument("--preset", default="book", choices=None, metavar="book|paper|full",
                   help="; ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"subset of {', '.join(NOTEBOOKS)}")
    p.add_argument("--jobs", default="1", help="parallel notebooks (worker processes), >= 1")
    p.add_argument("--out", default="reproduce_out", help="output directory (created)")
    p.add_argument("--param", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a parameter in every selected notebook (VALUE parsed as JSON)")
    p.add_argument("--notebooks", default=None, help="directory holding the experiment notebooks")
    p.add_argument("--timeout", default="3600", help="per-cell timeout in seconds")
    p.add_argument("--scheduler", default=None, metavar="local|ADDRESS",
                   help="spread every experiment's seeds over a dask.distributed cluster: 'local' "
                   "starts a LocalCluster on 127.0.0.1, or the address tcp://HOST:PORT of a running "
                   "scheduler")
    p.add_argument("--workers", default=None,
                   help="worker processes of --scheduler local (one thread each), >= 1; default 2 "
                   "(a remote scheduler has its own workers)")
    return p


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated reproduction plan (everything checked, nothing run yet)."""

    preset: str
    names: tuple[str, ...]
    jobs: int
    out: Path
    notebook_dir: Path
    overrides: tuple[tuple[str, Any], ...]
    timeout: int
    scheduler: str | None = None
    workers: int = 2


def _positive_int_arg(text: str, name: str) -> int:
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive integer, got {text!r}") from None
    if v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v}")
    return v


def parse_args(argv: Sequence[str] | None = None) -> Plan:
    """Parse and validate the command line. Raises :class:`ValueError` on any bad argument."""
    ns = _build_parser().parse_args(argv)
    if ns.preset not in PRESET_NAMES:
        raise ValueError(f"--preset must be one of {PRESET_NAMES}, got {ns.preset!r}")
    names = resolve_names(ns.only, ns.preset)
    jobs = _positive_int_arg(ns.jobs, "--jobs")
    timeout = _positive_int_arg(ns.timeout, "--timeout")
    out = Path(ns.out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a directory, {str(out)!r} is an existing file")
    _check_out_parent(out)
    scheduler = _check_scheduler(ns.scheduler)
    if ns.workers is not None and scheduler != "local":
        # without a local cluster the option would be silently ignored
        raise ValueError(f"--workers sets the worker processes of --scheduler local; got --workers "
                         f"{ns.workers} with --scheduler {ns.scheduler!r} (a remote scheduler's workers are "
                         "started on their machines; serial runs use --jobs)")
    workers = _positive_int_arg("2" if ns.workers is None else ns.workers, "--workers")
    nb_dir = Path(ns.notebooks).resolve() if ns.notebooks else default_notebook_dir()
    missing = [n for n in names if not (nb_dir / f"{n}.ipynb").is_file()]
    if missing:
        raise ValueError(
            f"notebooks not found in {str(nb_dir)!r}: {missing} (pass --notebooks DIR pointing at "
            "book/experiments of a source checkout)"
        )
    overrides = tuple(_parse_param(t) for t in ns.param)
    for key, value in overrides:
        check_size_limits(key, value)
    plan = Plan(ns.preset, tuple(names), jobs, out, nb_dir, overrides, timeout, scheduler, workers)
    _check_overrides(plan)
    return plan


def _check_out_parent(out: Path) -> None:
    """The nearest existing ancestor of ``--out`` must be a directory (not a file)."""
    anc = out
    while not anc.exists():
        if anc.parent == anc:
            break
        anc = anc.parent
    if anc.exists() and not anc.is_dir():
        raise ValueError(f"--out {str(out)!r} cannot be created: {str(anc)!r} is a file, not a directory")


def _check_scheduler(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if text == "local":
        return text
    if "://" not in text:
        text = "tcp://" + text
    scheme, _, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls", "ws", "wss", "inproc", "ucx") or not host or not port.isdigit():
        raise ValueError(f"--scheduler must be 'local' or a scheduler address like tcp://HOST:PORT, "
                         f"got {text!r}")
    return text


def check_size_limits(key: str, value: Any) -> None:
    """Refuse a ``--param`` size above :data:`SIZE_LIMITS` (ints or tuples/lists of ints)."""
    limit = SIZE_LIMITS.get(key)
    if limit is None:
        return
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue  # type errors are reported by the experiment's own validation
        if v > limit:
            raise ValueError(f"--param {key}={value!r}: {key} must be <= {limit:,} on this command "
                             f"(got {v:,}); larger runs belong in a script calling the experiment's "
                             "run() directly")


def _prepare_out(out: Path) -> None:
    """Create ``--out`` and check it is writable, before any work (clear error otherwise)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".fedlam-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"--out {str(out)!r} is not writable: {exc.strerror or exc}") from None


def start_local_cluster(workers: int) -> Any:
    """A ``dask.distributed.LocalCluster`` on 127.0.0.1: ``workers`` processes, one thread each,
    the diagnostics page on a random loopback port. The caller closes it."""
    from distributed import LocalCluster

    return LocalCluster(host="127.0.0.1", n_workers=workers, threads_per_worker=1, processes=True,
                        dashboard_address="127.0.0.1:0")


def _check_overrides(plan: Plan) -> None:
    """Build every selected experiment's parameters now, so bad values fail before any work."""
    for name in plan.names:
        mod = importlib.import_module(f"fedlam.experiments.{NOTEBOOKS[name]}")
        kwargs = dict(plan.overrides)
        try:
            mod.make_params(plan.preset, **kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--param for notebook {name!r}: {exc}") from None


def run_notebook(
    name: str, notebook_dir: str, out: str, preset: str, overrides: dict, timeout: int
) -> dict:
    """Execute one notebook with papermill; returns a status record (never raises)."""
    import papermill as pm

    src = Path(notebook_dir) / f"{name}.ipynb"
    dest_dir = Path(out) / name
    dest_dir.mkdir(parents=True, exist_ok=True)
    params = {"preset": preset, "out_dir": str(dest_dir), **overrides}
    t0 = time.perf_counter()
    record: dict[str, Any] = {"name": name, "output": str(dest_dir / f"{name}.ipynb")}
    try:
        pm.execute_notebook(
            str(src), str(dest_dir / f"{name}.ipynb"), parameters=params,
            progress_bar=False, log_output=False, execution_timeout=timeout, cwd=str(src.parent),
        )
        record["status"] = "ok"
    except Exception as exc:  # reported in summary.json and on stderr
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
    record["seconds"] = round(time.perf_counter() - t0, 1)
    record["figures"] = sorted(p.name for p in dest_dir.glob("*.png"))
    return record


def _configure_env(jobs: int) -> None:
    """Static widgets, and one BLAS thread per notebook unless the caller set otherwise.

    The experiments work on small matrices (N <= 1000); on a shared machine one OpenBLAS thread
    per kernel is faster than several competing ones (see benchmarks/README.md). ``jobs`` is
    accepted for symmetry: parallelism comes from running ``jobs`` notebooks at once.
    """
    os.environ["FEDLAM_WIDGETS"] = "static"
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code (0 when every notebook ran)."""
    try:
        plan = parse_args(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import papermill  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        print(f"error: {exc}; install the book extras: pip install -e '.[book]'", file=sys.stderr)
        return 2
    try:
        _prepare_out(plan.out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _configure_env(plan.jobs)
    cluster = None
    if plan.scheduler is not None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            print("error: --scheduler needs dask.distributed: pip install 'fedlam[cluster]'", file=sys.stderr)
            return 2
        from fedlam.experiments._executor import SCHEDULER_ENV, dask_executor

        try:
            if plan.scheduler == "local":
                cluster = start_local_cluster(plan.workers)
                address = cluster.scheduler_address
            else:
                address = plan.scheduler
                dask_executor(address, timeout=CONNECT_TIMEOUT)  # fail now if nobody answers
        except (OSError, TimeoutError) as exc:
            print(f"error: --scheduler {plan.scheduler}: cannot reach a Dask scheduler ({exc})",
                  file=sys.stderr)
            if cluster is not None:
                cluster.close()
            return 2
        os.environ[SCHEDULER_ENV] = address
        print(f"Dask scheduler {address}", file=sys.stderr)
    try:
        return _run_plan(plan)
    finally:
        if cluster is not None:
            os.environ.pop("FEDLAM_SCHEDULER", None)
            cluster.close()


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none): the machine may be shared."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def _summary(plan: Plan, records: list[dict], t0: float, load_start: list[float] | None, finished: bool) -> dict:
    order = {n: i for i, n in enumerate(plan.names)}
    done = sorted(records, key=lambda r: order[r["name"]])
    ran = {r["name"] for r in done}
    return {
        "preset": plan.preset,
        "finished": finished,
        "jobs": plan.jobs,
        "scheduler": plan.scheduler,
        "workers": plan.workers if plan.scheduler == "local" else None,
        "overrides": dict(plan.overrides),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "load_average_start": load_start,
        "load_average_end": _load_average(),
        "cpu_count": os.cpu_count(),
        "not_run": [n for n in NOTEBOOKS if n not in plan.names],
        "pending": [n for n in plan.names if n not in ran],
        "notebooks": done,
    }


def _run_plan(plan: Plan) -> int:
    """Execute the notebooks of a validated plan and write ``summary.json``.

    ``summary.json`` is rewritten after every notebook (``"finished": false`` and the notebooks
    still ``"pending"`` until the last one ends), so an interrupted run keeps the times measured.
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    load_start = _load_average()
    records: list[dict] = []
    path = plan.out / "summary.json"

    def record(rec: dict) -> None:
        records.append(rec)
        path.write_text(json.dumps(_summary(plan, records, t0, load_start, False), indent=2) + "\n")

    args = [(n, str(plan.notebook_dir), str(plan.out), plan.preset, dict(plan.overrides), plan.timeout)
            for n in plan.names]
    with tqdm(total=len(args), desc=f"notebooks ({plan.preset})", unit="nb") as bar:
        if plan.jobs == 1:
            for a in args:
                record(run_notebook(*a))
                bar.set_postfix_str(f"{a[0]} {records[-1]['status']}")
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=plan.jobs) as pool:
                futs = {pool.submit(run_notebook, *a): a[0] for a in args}
                for fut in as_completed(futs):
                    record(fut.result())
                    bar.set_postfix_str(f"{futs[fut]} {records[-1]['status']}")
                    bar.update(1)
    summary = _summary(plan, records, t0, load_start, True)
    records = summary["notebooks"]
    path.write_text(json.dumps(summary, indent=2) + "\n")
    failed = [r for r in records if r["status"] != "ok"]
    for r in records:
        print(f"{r['name']:12s} {r['status']:7s} {r['seconds']:8.1f} s  -> {r['output']}")
    print(f"total {summary['total_seconds']:.1f} s (load average {load_start} at the start, "
          f"{summary['load_average_end']} at the end); summary in {plan.out / 'summary.json'}")
    not_run = [n for n in NOTEBOOKS if n not in plan.names]
    if not_run and plan.preset == "paper":
        print(f"not in the paper, not run: {', '.join(not_run)} (--preset full runs them, "
              "or name them with --only)")
    for r in failed:
        print(f"FAILED {r['name']}: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
