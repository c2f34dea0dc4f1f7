r"""Start and stop a Flower Deployment-Engine federation on this machine (loopback).

:class:`LocalFederation` starts one SuperLink and one SuperNode per site on 127.0.0.1, each on
a free port, with ``--insecure`` and runtime dependency installation disabled (the apps are
imported from the installed ``fedlam``), submits the fedlam app with ``flwr run`` and waits for
it with ``flwr ls --format json``. Every process it starts -- and every process those start
(SuperExec, ServerApp, ClientApp) -- is stopped when the context exits, also on an exception or
Ctrl-C. It is what ``python -m fedlam.flower local`` and the end-to-end test use; on real
machines the same commands run one per site (chapter 13, {ref}`sec-deploy-real`).

Flower's state for the run (its ``config.toml`` with the SuperLink connection, the app bundle,
logs) lives in a private ``FLWR_HOME`` directory removed at the end; the user's ``~/.flwr`` is
never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FlowerError", "LocalFederation", "free_port", "format_node_config", "format_toml_value",
           "write_app", "flower_environment", "APP_COMPONENTS", "processes_with_env"]

#: the fedlam Flower app: ServerApp and ClientApp objects importable from the installed package
APP_COMPONENTS = {"serverapp": "fedlam.flower.server_app:app",
                  "clientapp": "fedlam.flower.client_app:app"}

CONNECTION = "fedlam-local"


class FlowerError(RuntimeError):
    """A Flower process failed (port clash, crashed node, failed run); the message says which."""


def free_port(host: str = "127.0.0.1", exclude: Collection[int] = ()) -> int:
    """A TCP port that is free on ``host`` now (the OS picks it) and not in ``exclude``.

    ``exclude``: ports already handed to processes that may not have bound them yet (the OS can
    hand a released port out again at once: a SuperNode started without waiting and the next one
    once got the same port).
    """
    if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Collection) \
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in exclude):
        raise TypeError(f"exclude must be a collection of int ports, got {exclude!r:.80}")
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in exclude:
            return port
    raise FlowerError(f"no free port on {host} outside the {len(exclude)} already handed out")


def format_toml_value(v: Any) -> str:
    """One TOML value (bool, int, float, str) as Flower's ``--node-config``/``--run-config`` take it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"TOML values must be finite, got {v!r}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string for printable text
    raise TypeError(f"config values must be bool, int, float or str, got {type(v).__name__} {v!r}")


def format_node_config(cfg: Mapping[str, Any]) -> str:
    """``key=value`` pairs separated by spaces (the ``--node-config`` syntax)."""
    return " ".join(f"{k}={format_toml_value(v)}" for k, v in cfg.items())


def write_app(directory: str | os.PathLike, run_config: Mapping[str, Any],
              components: Mapping[str, str] = APP_COMPONENTS, name: str = "fedlam-federation") -> Path:
    """Write a Flower app project (a ``pyproject.toml`` only) whose components are imported
    from the installed package, with ``run_config`` as its ``[tool.flwr.app.config]``.

    ``flwr run DIR CONNECTION`` submits it. Every run-config key must be declared here: Flower
    refuses ``--run-config`` overrides of undeclared keys.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    lines = [
        "[build-system]", 'requires = ["hatchling"]', 'build-backend = "hatchling.build"', "",
        "[project]", f'name = "{name}"', 'version = "1.0.0"',
        'description = "fedlam federation: clients and server of the book as Flower apps"',
        'license = "MIT"', 'dependencies = ["fedlam[flower]"]', "",
        "[tool.flwr.app]", 'publisher = "fedlam"', "",
        "[tool.flwr.app.components]",
        *[f'{k} = "{v}"' for k, v in components.items()], "",
        "[tool.flwr.app.config]",
        *[f"{k} = {format_toml_value(v)}" for k, v in run_config.items()], "",
    ]
    p = d / "pyproject.toml"
    p.write_text("\n".join(lines))
    return p


def flower_environment(flwr_home: str | os.PathLike, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of every Flower process: private FLWR_HOME, no telemetry, no update check,
    no runtime dependency installation, one BLAS thread (the in-process numbers)."""
    env = dict(os.environ if base is None else base)
    env.update({
        "FLWR_HOME": str(flwr_home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "PYTHONUNBUFFERED": "1",
    })
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    # the SuperLink and SuperNodes start `flower-superexec` (and it `flwr-serverapp` /
    # `flwr-clientapp`) through PATH: put this interpreter's scripts first, so that an
    # environment used without activating it (``/path/to/venv/bin/python -m ...``) still works
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "") if env.get("PATH") else bindir
    # SuperExec looks for new ClientApp/ServerApp tasks every second by default; on loopback a
    # shorter interval takes up to ~0.5 s off every round (the SuperNode's own 3 s idle poll of
    # the SuperLink is fixed in Flower 1.42)
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.5")
    return env


def _bin(name: str) -> str:
    """Path of a Flower console script installed beside this interpreter (else on PATH)."""
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise FlowerError(f"{name} not found: install Flower with pip install 'fedlam[flower]'")
    return found


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def _descendants(pids: Sequence[int]) -> list[int]:
    """Every live descendant of ``pids`` (children of children...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = list(pids)
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def processes_with_env(key: str, value: str) -> list[int]:
    """Live processes whose environment holds ``key=value`` (every process of one federation
    carries its private ``FLWR_HOME``, even those re-parented after their parent died)."""
    needle = f"{key}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and _alive(int(entry)):
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path


@dataclass
class LocalFederation:
    """A SuperLink and SuperNodes on 127.0.0.1 (a context manager; see the module notes).

    Parameters
    ----------
    node_configs : sequence of dict
        One ``--node-config`` dict per SuperNode (site).
    log_dir : path
        Where each process's log goes (``superlink.log``, ``supernode-<i>.log``, ``run.log``).
    startup_timeout : float
        Seconds to wait for the SuperLink and for each SuperNode to come up.
    superlink_port : int
        Port of the SuperLink (0: a free one).
    """

    node_configs: Sequence[Mapping[str, Any]]
    log_dir: str | os.PathLike
    startup_timeout: float = 60.0
    host: str = "127.0.0.1"
    procs: list = field(default_factory=list, init=False)
    superlink_port: int = 0
    node_ports: list = field(default_factory=list, init=False)

    # -- life cycle --------------------------------------------------------------------------
    def __enter__(self) -> LocalFederation:
        self._tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(prefix="fedlam-flower-")
        self.home = Path(self._tmp.name) / "flwr-home"
        self.home.mkdir()
        self.app_dir = Path(self._tmp.name) / "app"
        self.logs = Path(self.log_dir)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = flower_environment(self.home)
        self._old_sigterm = signal.getsignal(signal.SIGTERM)
        if self._old_sigterm in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            self._start_superlink()
            started = [self.start_node(i, cfg, wait=False) for i, cfg in enumerate(self.node_configs)]
            for i, (port, proc) in enumerate(started):
                self._wait_ready(proc, "SuperNode ID:", f"flower-supernode {i} (port {port})")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _spawn(self, name: str, cmd: list[str]) -> _Proc:
        log = self.logs / f"{name}.log"
        fh = open(log, "wb")
        try:
            p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=self.env, cwd=str(self.home), start_new_session=True)
        finally:
            fh.close()
        proc = _Proc(name, p, log)
        self.procs.append(proc)
        return proc

    def _wait_ready(self, proc: _Proc, marker: str, what: str) -> None:
        """Wait until ``marker`` appears in the process's log (it is up), or fail clearly."""
        t_end = time.monotonic() + self.startup_timeout
        while time.monotonic() < t_end:
            try:
                text = proc.log.read_text(errors="replace")
            except OSError:
                text = ""
            if marker in text:
                return
            if proc.popen.poll() is not None:
                clash = "address already in use" in text.lower() or "errno 98" in text.lower()
                raise FlowerError(
                    f"{what} exited with code {proc.popen.returncode} before it was ready"
                    + (" -- its port is already in use by another program" if clash else "")
                    + f". Last lines of {proc.log.name}:\n{_tail(proc.log)}")
            time.sleep(0.1)
        raise FlowerError(f"{what} was not ready within {self.startup_timeout:g} s (no {marker!r} in "
                          f"{proc.log.name}). Last lines:\n{_tail(proc.log)}")

    def _start_superlink(self) -> None:
        self.superlink_port = self.superlink_port or free_port(self.host)
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.host}:{self.superlink_port}"\ninsecure = true\n')
        proc = self._spawn("superlink", [
            _bin("flower-superlink"), "--insecure", "--host", self.host,
            "--port", str(self.superlink_port), "--disable-runtime-dependency-installation"])
        self._wait_ready(proc, "Uvicorn running on", f"flower-superlink (port {self.superlink_port})")

    def start_node(self, i: int, cfg: Mapping[str, Any], wait: bool = True) -> tuple[int, _Proc]:
        """Start SuperNode ``i`` with ``cfg`` as its ``--node-config`` (late joiners too);
        returns its port and process."""
        port = free_port(self.host, exclude={self.superlink_port, *self.node_ports})
        self.node_ports.append(port)
        proc = self._spawn(f"supernode-{i}", [
            _bin("flower-supernode"), "--insecure", "--superlink", f"{self.host}:{self.superlink_port}",
            "--host", self.host, "--port", str(port), "--max-retries", "0",
            "--node-config", format_node_config(cfg)])
        if wait:
            self._wait_ready(proc, "SuperNode ID:", f"flower-supernode {i} (port {port})")
        return port, proc

    def node(self, i: int) -> subprocess.Popen:
        """The Popen of SuperNode ``i``."""
        for p in self.procs:
            if p.name == f"supernode-{i}":
                return p.popen
        raise KeyError(f"no SuperNode {i}")

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` and everything it started (a site going down)."""
        p = self.node(i)
        _kill_tree([p.pid], grace=0.0)

    def all_pids(self) -> list[int]:
        """Every live process started by this federation, descendants (and orphans) included."""
        roots = [p.popen.pid for p in self.procs if p.popen.poll() is None]
        found = roots + _descendants(roots) + processes_with_env("FLWR_HOME", str(self.home))
        return sorted(pid for pid in set(found) if _alive(pid))

    def stop(self) -> None:
        """Stop every process started (SIGTERM, then SIGKILL after 5 s) and remove FLWR_HOME."""
        roots = [p.popen.pid for p in self.procs]
        if getattr(self, "home", None) is not None:
            roots += processes_with_env("FLWR_HOME", str(self.home))
        _kill_tree(sorted(set(roots)), grace=5.0)
        for p in self.procs:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL already sent
                pass
        if getattr(self, "_old_sigterm", None) is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
            self._tmp = None

    # -- flwr CLI ----------------------------------------------------------------------------
    def flwr(self, *args: str, timeout: float = 120.0) -> dict:
        """Run ``flwr ARGS --format json`` against this SuperLink and return its JSON answer."""
        cmd = [_bin("flwr"), *args, "--format", "json"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=str(self.home),
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise FlowerError(f"`flwr {' '.join(args)}` did not answer within {timeout:g} s") from None
        try:
            return json.loads(res.stdout)
        except json.JSONDecodeError:
            raise FlowerError(f"`flwr {' '.join(args)}` failed (exit {res.returncode}):\n"
                              f"{(res.stdout + res.stderr)[-3000:]}") from None

    def submit(self, run_config: Mapping[str, Any], components: Mapping[str, str] = APP_COMPONENTS,
               files: Mapping[str, str] | None = None, name: str = "fedlam-federation") -> str:
        """Write the app with ``run_config`` and ``flwr run`` it; returns the run id.

        ``files`` ({file name: text}) are written beside the ``pyproject.toml`` and travel in the
        app bundle (e.g. the module of another app's components, as the benchmark's echo app);
        each submitted app gets its own directory.
        """
        self._n_apps = getattr(self, "_n_apps", 0) + 1
        if self._n_apps > 1 or files:
            self.app_dir = Path(self.app_dir).parent / f"app-{self._n_apps}"
        write_app(self.app_dir, run_config, components, name=name)
        for fname, text in (files or {}).items():
            if Path(fname).name != fname:
                raise ValueError(f"files must be plain file names, got {fname!r}")
            (Path(self.app_dir) / fname).write_text(text)
        ans = self.flwr("run", str(self.app_dir), CONNECTION)
        if not ans.get("success"):
            raise FlowerError(f"flwr run failed: {ans.get('error-message', ans)}")
        return str(ans["run-id"])

    def status(self, run_id: str) -> dict:
        """The ``flwr ls`` entry of ``run_id`` (status, network traffic, times)."""
        ans = self.flwr("ls", CONNECTION, "--run-id", run_id)
        if not ans.get("success"):
            raise FlowerError(f"flwr ls failed: {ans.get('error-message', ans)}")
        for r in ans.get("runs", []):
            if str(r.get("run-id")) == run_id:
                return r
        raise FlowerError(f"run {run_id} not listed by the SuperLink")

    def logs_of(self, run_id: str) -> str:
        """The ServerApp's log of a run (``flwr log RUN_ID --show``)."""
        cmd = [_bin("flwr"), "log", run_id, CONNECTION, "--show"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=str(self.home),
                                 timeout=60, stdin=subprocess.DEVNULL)
            return res.stdout + res.stderr
        except subprocess.TimeoutExpired:
            return "(flwr log timed out)"

    def wait(self, run_id: str, timeout: float, poll: float = 1.0, on_poll: Any = None) -> dict:
        """Poll the run until it is ``finished:*``; raise :class:`FlowerError` if it fails, the
        SuperLink dies, or ``timeout`` seconds pass. ``on_poll(status)`` is called each poll."""
        from fedlam._validation import check_in_range

        timeout = check_in_range(timeout, "timeout", 0.0, None, low_open=True)  # NaN never times out
        t_end = time.monotonic() + timeout
        link = self.procs[0]
        while True:
            if link.popen.poll() is not None:
                raise FlowerError(f"the SuperLink exited (code {link.popen.returncode}) during the run:\n"
                                  f"{_tail(link.log)}")
            st = self.status(run_id)
            if on_poll is not None:
                on_poll(st)
            s = str(st.get("status", ""))
            if s.startswith("finished:"):
                if s != "finished:completed":
                    details = str(st.get("status-details", ""))
                    hint = (" -- the ServerApp process missed Flower's heartbeat; on an overloaded "
                            "machine every process is starved, try again with fewer sites or less load"
                            if "heartbeat" in details.lower() else "")
                    raise FlowerError(f"run {run_id} ended as {s} ({details}){hint}. "
                                      f"ServerApp log:\n{self.logs_of(run_id)[-4000:]}")
                return st
            if time.monotonic() > t_end:
                self.flwr("stop", run_id, CONNECTION)
                raise FlowerError(f"run {run_id} did not finish within {timeout:g} s (status {s})")
            time.sleep(poll)

    def dead_nodes(self) -> list[int]:
        """Indices of SuperNodes whose process has exited."""
        out = []
        for p in self.procs:
            if p.name.startswith("supernode-") and p.popen.poll() is not None:
                out.append(int(p.name.split("-")[1]))
        return out


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:  # pragma: no cover - signal path
    raise KeyboardInterrupt(f"signal {signum}")


def _kill_tree(roots: Sequence[int], grace: float) -> None:
    """SIGTERM ``roots`` and all their descendants; SIGKILL whatever is left after ``grace`` s."""
    pids = [p for p in list(roots) + _descendants(roots) if _alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGKILL:
            break
        t_end = time.monotonic() + grace
        while time.monotonic() < t_end and any(_alive(p) for p in pids):
            time.sleep(0.05)
        # processes started meanwhile by the dying ones are caught by the second pass
        pids = [p for p in pids + _descendants(pids) if _alive(p)]
        if not pids:
            return
