"""Fixtures of the Kubernetes tests: kubectl-shaped inputs and a live gpuplan server."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmarks.load import launch
from tests.k8s import scenario
from tests.k8s.fakeapi import FakeApiServer

FIXTURES = Path(__file__).parent / "fixtures"


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


@contextmanager
def serve(tmp: Path, env_extra: dict[str, str] | None = None,
          serve_args: list[str] | None = None) -> Iterator[str]:
    """A real `uvicorn --factory api.app:create_app` on a free loopback port (the shared
    launcher, benchmarks/load.py), one worker; its URL once /healthz answers.

    With `serve_args`, `gpuplan serve <serve_args>` (the CLI) runs it instead.
    """
    settings: dict[str, Any] = {"workers": 1}
    settings.update({k.removeprefix("GPUPLAN_").lower(): v for k, v in (env_extra or {}).items()})
    server = launch(tmp, cli=serve_args is not None, args=serve_args or (), ready_s=60,
                    ready_path="/healthz", **settings)
    try:
        yield server.url
    finally:
        server.stop(wait_s=20)


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
