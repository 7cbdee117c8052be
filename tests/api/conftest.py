"""Live servers for the API tests: real uvicorn processes on free loopback ports."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.load import LocalServer, free_port, launch

REPO = Path(__file__).resolve().parents[2]
FAKE = "tests.api.fake_planner:plan"
TOKEN = "s3cret-token"

__all__ = ["FAKE", "REPO", "TOKEN", "Server", "free_port", "wait_for"]


class Server:
    """A gpuplan server in a subprocess: `uvicorn --factory` or `gpuplan serve`, started by
    the shared launcher (benchmarks/load.py: `launch`)."""

    def __init__(self, tmp: Path, *, cli: bool = False, workers: int = 2,
                 **settings: Any) -> None:
        self.tmp = tmp
        self.cli = cli
        self.workers = workers
        self.settings = {"db_path": str(tmp / "gpuplan.db"), "planner": FAKE, **settings}
        self._server: LocalServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._server.proc if self._server is not None else None

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def start(self) -> Server:
        self._server = launch(self.tmp, cli=self.cli, ready_s=60, workers=self.workers,
                              **self.settings)
        return self

    def log(self) -> str:
        return self._server.log() if self._server is not None else ""

    def worker_pids(self) -> list[int]:
        """PIDs of the solver workers (children of the forkserver child)."""
        assert self._server is not None
        return self._server.worker_pids()

    def intake_pids(self) -> list[int]:
        """PIDs of the request intake processes."""
        assert self._server is not None
        return self._server.intake_pids()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self._server is None:
            return
        self._server.stop(sig, wait_s=20)
        self._server = None


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
