"""A real browser for the docs and plan-view tests: Playwright driving Debian's Chromium.

`playwright install` downloads its own browser builds, which cannot work offline, so the
tests launch the system Chromium by path (`GPUPLAN_CHROMIUM`, else `chromium` on PATH;
`.ci/run` installs it with apt). They skip, saying why, only when no browser can be had.

Every request the browser makes (page loads, scripts, fetches, images, workers) is
recorded; `Recorder.outside()` lists those not on the loopback, and each test fails on
any. As a second guard the browser resolves no host name but the loopback's, so even a
request that slipped through could not reach another machine.

Screenshots go to `GPUPLAN_TEST_ARTIFACTS` (default `test-artifacts/browser` in the
repository); with `GPUPLAN_UPDATE_SCREENSHOTS=1` the plan-view ones also replace those in
`docs/images/`.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.api.conftest import Server

REPO = Path(__file__).resolve().parents[2]
DOCS_IMAGES = REPO / "docs" / "images"

def chromium_path() -> str | None:
    """The system Chromium to drive, or None."""
    given = os.environ.get("GPUPLAN_CHROMIUM")
    if given:
        return given if Path(given).exists() else None
    return next((p for name in ("chromium", "chromium-browser")
                 if (p := shutil.which(name)) is not None), None)


def is_loopback(url: str) -> bool:
    """True for URLs that cannot leave the machine: loopback hosts, data: and about:."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "about"):
        return True
    if parts.scheme == "blob":
        return is_loopback(url[len("blob:"):])
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Recorder:
    """Every request URL a browser context makes."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def outside(self) -> list[str]:
        """Recorded URLs that are not on the loopback."""
        return [u for u in self.urls if not is_loopback(u)]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go."""
    out = Path(os.environ.get("GPUPLAN_TEST_ARTIFACTS", REPO / "test-artifacts" / "browser"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless system Chromium, shared by the module's tests. Playwright is imported
    here, by the worker that runs a browser test, not by every worker at collection. Not
    session-wide: while Playwright's sync API is open, its event loop counts as running
    in the worker's main thread, and a later test there calling `asyncio.run` fails
    (with `--dist loadgroup` other tests may follow the browser tests on their worker)."""
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium to drive: install Debian's `chromium` (apt-get install "
                    "chromium) or set GPUPLAN_CHROMIUM to a Chromium binary")
    args = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium's sandbox refuses to run as root
    with playwright_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=args)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[tuple[Any, Recorder]]:
    """A fresh page (1400 x 900) and the recorder of its context's requests; the test fails
    if any request left the loopback."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    recorder = Recorder()
    context.on("request", lambda r: recorder.urls.append(r.url))
    pg = context.new_page()
    yield pg, recorder
    context.close()
    assert recorder.urls, "the browser made no request at all"
    assert not recorder.outside(), f"requests left the machine: {recorder.outside()}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real service with the real solver on one worker (no token, plain uvicorn)."""
    srv = Server(tmp_path_factory.mktemp("browser"), workers=1, planner="solver:plan",
                 max_time_limit_s=10, kill_grace_s=5, queue_size=4)
    srv.start()
    yield srv
    srv.stop()
