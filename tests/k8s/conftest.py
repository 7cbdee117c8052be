"""Fixtures of the Kubernetes tests: kubectl-shaped inputs and a live gpuplan server."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.k8s import scenario
from tests.k8s.fakeapi import FakeApiServer

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def nodes_json() -> dict[str, Any]:
    """`kubectl get nodes -o json` of a GPU Operator cluster (see fixtures/)."""
    data: dict[str, Any] = json.loads((FIXTURES / "nodes.json").read_text())
    return data


@pytest.fixture(scope="session")
def pods_json() -> dict[str, Any]:
    """`kubectl get pods -A -o json` of the same cluster."""
    data: dict[str, Any] = json.loads((FIXTURES / "pods.json").read_text())
    return data


@pytest.fixture
def nodes(nodes_json: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy a test may edit."""
    return copy.deepcopy(nodes_json)


@pytest.fixture
def pods(pods_json: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy a test may edit."""
    return copy.deepcopy(pods_json)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(tmp: Path, env_extra: dict[str, str] | None = None,
          serve_args: list[str] | None = None) -> Iterator[str]:
    """A real `uvicorn --factory api.app:create_app` on a free loopback port; its URL.

    With `serve_args`, `gpuplan serve <serve_args>` (the CLI) runs it instead.
    """
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
    env.update({"GPUPLAN_DB_PATH": str(tmp / "gpuplan.db"), "GPUPLAN_WORKERS": "1",
                "PYTHONPATH": str(REPO), **(env_extra or {})})
    log = (tmp / "server.log").open("wb")
    command = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
    if serve_args is not None:
        command = [sys.executable, "-m", "api.cli", "serve", *serve_args]
    proc = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=url, timeout=2) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError((tmp / "server.log").read_text()[-2000:])
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("server not ready in 60 s")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live gpuplan server shared by a module's tests."""
    with serve(tmp_path_factory.mktemp("k8s-server")) as url:
        yield url


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A fake Kubernetes API server (fakeapi.py) holding the four scenario nodes."""
    server = FakeApiServer().start()
    for node in scenario.nodes():
        server.add("nodes", node)
    try:
        yield server
    finally:
        server.stop()
