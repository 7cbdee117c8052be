"""Service load test: throughput and p50/p99 latency of `POST /v1/plans` for S-sized requests.

`gpuplan bench load` starts a server on a free loopback port (or targets `--url`, which must
be a loopback address) and, for each concurrency level (1, 8 and 32 clients by default),
runs httpx async clients that post S-sized requests until `--requests` answers or
`--duration` seconds, whichever comes first. Every loop is bounded in count and time.

`launch` / `local_server` start such a server (uvicorn or `gpuplan serve`) for this
benchmark, the latency benchmark, the robustness check (api/robustness.py) and the tests.

Figures: answers per second (200s only), latency percentiles of the 200s, and the counts of
429 (queue full) and other failures. On a shared machine the figures are pessimistic.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import typer

log = logging.getLogger("gpuplan.bench.load")

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Requests per level are drawn round-robin from this many distinct S instances.
DISTINCT_REQUESTS = 8


@dataclass(frozen=True)
class LevelResult:
    """The figures of one concurrency level."""

    clients: int
    ok: int
    rejected: int
    failed: int
    elapsed_s: float
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `values` (nan when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def s_requests(count: int, seed: int, time_limit_s: float) -> list[dict[str, Any]]:
    """`count` S-sized request bodies: `benchmarks.generator.generate("S", seed + i)`."""
    from benchmarks.generator import generate

    bodies = []
    for i in range(count):
        body = generate("S", seed + i).model_dump(mode="json", exclude_none=True)
        body["policy"]["time_limit_s"] = time_limit_s
        bodies.append(body)
    return bodies


def require_loopback(url: str) -> None:
    """Raise ValueError unless `url` points at this machine's loopback interface."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"load tests only target loopback addresses, not {host!r}")


async def run_level(url: str, bodies: Sequence[dict[str, Any]], clients: int,
                    max_requests: int, max_seconds: float,
                    headers: dict[str, str] | None = None) -> LevelResult:
    """`clients` concurrent clients posting `bodies` round-robin, bounded in count and time."""
    latencies: list[float] = []
    counts = {"rejected": 0, "failed": 0}
    issued = 0
    start = time.perf_counter()
    deadline = start + max_seconds

    def next_body() -> dict[str, Any] | None:
        nonlocal issued
        if issued >= max_requests or time.perf_counter() >= deadline:
            return None
        issued += 1
        return bodies[issued % len(bodies)]

    async def client(c: httpx.AsyncClient) -> None:
        while (body := next_body()) is not None:
            t0 = time.perf_counter()
            try:
                r = await c.post("/v1/plans", json=body)
            except httpx.HTTPError as e:
                log.warning("request failed: %s", e)
                counts["failed"] += 1
                continue
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            elif r.status_code == 429:
                counts["rejected"] += 1
                await asyncio.sleep(0.05)
            else:
                counts["failed"] += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(max_seconds + 120.0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout,
                                 headers=headers) as c:
        await asyncio.gather(*(client(c) for _ in range(clients)))
    elapsed = time.perf_counter() - start
    ms = [x * 1000 for x in latencies]
    return LevelResult(
        clients=clients, ok=len(ms), rejected=counts["rejected"], failed=counts["failed"],
        elapsed_s=elapsed, throughput_rps=len(ms) / elapsed if elapsed > 0 else 0.0,
        p50_ms=percentile(ms, 50), p99_ms=percentile(ms, 99), max_ms=max(ms, default=math.nan),
    )


def run_load(url: str, levels: Sequence[int], bodies: Sequence[dict[str, Any]],
             max_requests: int, max_seconds: float,
             token: str | None = None) -> list[LevelResult]:
    """Run every concurrency level in turn against `url` (loopback only)."""
    require_loopback(url)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    with httpx.Client(base_url=url, headers=headers, timeout=120) as warm:
        warm.post("/v1/plans", json=bodies[0]).raise_for_status()
    return [asyncio.run(run_level(url, bodies, n, max_requests, max_seconds, headers))
            for n in levels]


# ---------------------------------------------------------------- local servers


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LocalServer:
    """A gpuplan server started by `launch` on a loopback port, its log in `log_path`."""

    url: str
    proc: subprocess.Popen[bytes]
    token: str | None
    log_path: Path

    @property
    def port(self) -> int:
        """The TCP port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def client(self, *, auth: bool = True, timeout: float = 60.0) -> httpx.Client:
        """A client, with the bearer token when `auth` and the server has one."""
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def worker_pids(self) -> list[int]:
        """PIDs of the solver workers (grandchildren through the forkserver)."""
        return [g for g in self._forked() if _comm(g) != INTAKE_NAME]

    def intake_pids(self) -> list[int]:
        """PIDs of the request intake processes (forked there too, named apart)."""
        return [g for g in self._forked() if _comm(g) == INTAKE_NAME]

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds used so far by the API process and by the solver workers now alive
        (from /proc; resolution one clock tick)."""
        return cpu_seconds(self.proc.pid), sum(cpu_seconds(p) for p in self.worker_pids())

    def _forked(self) -> list[int]:
        return [g for k in _children(self.proc.pid) for g in _children(k)
                if "forkserver" in _cmdline(g)]

    def log(self, chars: int = 3000) -> str:
        """The end of the server's output."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> int:
        """Send `sig` and wait for the exit (SIGKILL after `wait_s`); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def launch(directory: Path, *, token: str | None = None, cli: bool = False,
           args: Sequence[str] = (), ready_s: float = 90.0, ready_path: str = "/readyz",
           root: Path | None = None, **settings: Any) -> LocalServer:
    """Start a gpuplan server on a free loopback port and wait until `ready_path` answers
    200: `uvicorn --factory api.app:create_app`, or `gpuplan serve` with `cli` (and its
    options `args`). `settings`
    become `GPUPLAN_*` variables (names without the prefix; the rest of the caller's
    `GPUPLAN_*` environment is dropped); the database is an SQLite file in `directory`
    unless `db_path` or `db_url` say otherwise, and the log is `directory/server-PORT.log`.
    `root`: run the code of another gpuplan checkout (default: this one).
    Raises RuntimeError with the log's end when the server exits or is not ready in time."""
    root = root or REPO_ROOT
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
    env["GPUPLAN_DB_PATH"] = str(directory / "gpuplan.db")
    env.update({f"GPUPLAN_{k.upper()}": str(v) for k, v in settings.items()})
    if token:
        env["GPUPLAN_API_TOKEN"] = token
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    if cli:
        cmd = [sys.executable, "-m", "api.cli", "serve"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
    cmd += [*args, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    log_path = directory / f"server-{port}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    server = LocalServer(f"http://127.0.0.1:{port}", proc, token, log_path)
    try:
        _wait_ready(server, ready_path, ready_s)
    except BaseException:
        server.stop(signal.SIGKILL)
        raise
    return server


@contextlib.contextmanager
def local_server(*, token: str | None = None, ready_s: float = 90.0, root: Path | None = None,
                 **settings: Any) -> Iterator[LocalServer]:
    """`launch` a server (of the checkout at `root`, default this one) with a throw-away
    directory; stop it (SIGTERM, then SIGKILL after 30 s) on exit."""
    with tempfile.TemporaryDirectory(prefix="gpuplan-server-") as tmp:
        server = launch(Path(tmp), token=token, ready_s=ready_s, root=root, **settings)
        try:
            yield server
        finally:
            server.stop()


def _wait_ready(server: LocalServer, path: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    with httpx.Client(base_url=server.url, timeout=2) as c:
        while time.monotonic() < end:
            if server.proc.poll() is not None:
                raise RuntimeError(f"the server exited during start-up: {server.log()}")
            with contextlib.suppress(httpx.TransportError):
                if c.get(path).status_code == 200:
                    return
            time.sleep(0.1)
    raise RuntimeError(f"the server was not ready within {seconds:g} s: {server.log()}")


def _children(pid: int) -> list[int]:
    """Live child processes of `pid` (scanning /proc: any thread may have started them)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.append(int(entry))
    return out


#: What the service's intake processes call themselves (api/intake.py: PROCESS_NAME).
INTAKE_NAME = "gpuplan-intake"


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def format_table(results: Sequence[LevelResult]) -> str:
    """The figures as an aligned text table."""
    head = (f"{'clients':>7} {'ok':>5} {'429':>5} {'fail':>5} {'req/s':>7} "
            f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = [f"{r.clients:>7} {r.ok:>5} {r.rejected:>5} {r.failed:>5} {r.throughput_rps:>7.2f} "
            f"{r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.max_ms:>8.1f}" for r in results]
    return "\n".join([head, *rows])


def load_command(
    url: Annotated[str | None, typer.Option(
        help="Target server (loopback only). Default: start one on a free loopback port.")]
    = None,
    clients: Annotated[str, typer.Option(help="Comma-separated concurrency levels.")]
    = "1,8,32",
    requests: Annotated[int, typer.Option(min=1, max=100000,
                                          help="Most requests per level.")] = 200,
    duration: Annotated[float, typer.Option(min=0.5, max=3600,
                                            help="Most seconds per level.")] = 20.0,
    workers: Annotated[int, typer.Option(min=1, max=64,
                                         help="Solver workers of a started server.")] = 2,
    time_limit: Annotated[float, typer.Option(min=0.05, help="policy.time_limit_s sent.")]
    = 5.0,
    seed: Annotated[int, typer.Option(min=0, help="First generator seed.")] = 0,
    token: Annotated[str | None, typer.Option(envvar="GPUPLAN_API_TOKEN",
                                              help="Bearer token for --url.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="Also write the figures as JSON.")]
    = None,
) -> None:
    """Throughput and p50/p99 latency of POST /v1/plans for S-sized requests."""
    try:
        levels = [int(x) for x in clients.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {clients!r}",
                                 param_hint="--clients") from None
    if not levels or min(levels) < 1 or max(levels) > 1024:
        raise typer.BadParameter("levels must be between 1 and 1024", param_hint="--clients")
    if url is not None:
        try:
            require_loopback(url)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--url") from None
    bodies = s_requests(DISTINCT_REQUESTS, seed, time_limit)
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(local_server(workers=workers,
                                                   queue_size=2 * max(levels))).url
            token = None
        results = run_load(url, levels, bodies, requests, duration, token)
    typer.echo(f"POST /v1/plans, S-sized requests (32 GPUs, 40 jobs), {url}")
    typer.echo(format_table(results))
    if output is not None:
        output.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
