"""Live servers for the API tests: real uvicorn processes on free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = "tests.api.fake_planner:plan"
TOKEN = "s3cret-token"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def descendants(pid: int) -> list[int]:
    """Every live descendant process of `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


class Server:
    """A gpuplan server in a subprocess: `uvicorn --factory` or `gpuplan serve`."""

    def __init__(self, tmp: Path, *, cli: bool = False, workers: int = 2,
                 **settings: Any) -> None:
        self.tmp = tmp
        self.cli = cli
        self.workers = workers
        self.settings = {"db_path": str(tmp / "gpuplan.db"), "planner": FAKE, **settings}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def start(self) -> Server:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
        env.update({f"GPUPLAN_{k.upper()}": str(v) for k, v in self.settings.items()})
        env["PYTHONPATH"] = str(REPO)
        if self.cli:
            cmd = [sys.executable, "-c", "from api.cli import main; main()", "serve",
                   "--port", str(self.port), "--workers", str(self.workers),
                   "--log-level", "warning"]
        else:
            env["GPUPLAN_WORKERS"] = str(self.workers)
            cmd = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app",
                   "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        self._log = (self.tmp / f"server-{self.port}.log").open("wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        end = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=2) as c:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"server exited: {self.log()}")
                try:
                    if c.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"server not ready in {timeout} s: {self.log()}")

    def log(self) -> str:
        path = self.tmp / f"server-{self.port}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def worker_pids(self) -> list[int]:
        """PIDs of the solver workers (children of the forkserver child)."""
        assert self.proc is not None
        return [p for p in descendants(self.proc.pid)
                if p not in _direct_children(self.proc.pid)
                and "forkserver" in _cmdline(p)]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _direct_children(pid: int) -> set[int]:
    out = set()
    for p in descendants(pid):
        try:
            if int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.add(p)
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_for(fn: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `fn` until it returns a truthy value (returned) or fail after `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture(scope="session")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two workers running the fake planner, small limits, short kill grace."""
    server = Server(tmp_path_factory.mktemp("fake"), workers=2, queue_size=2,
                    max_time_limit_s=3, kill_grace_s=0.5, max_nodes=4, max_gpus=16,
                    max_jobs=10, max_body_bytes=20000, retry_after_s=7)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real solver (`solver:plan`) on one worker, started with `gpuplan serve`, with an
    API token and one CORS origin."""
    server = Server(tmp_path_factory.mktemp("real"), cli=True, workers=1,
                    planner="solver:plan", max_time_limit_s=2, kill_grace_s=3,
                    max_nodes=16, max_gpus=64, max_jobs=32, queue_size=4,
                    api_token=TOKEN, cors_origins="https://ops.example")
    server.start()
    yield server
    server.stop()
