"""`gpuplan bench latency`: end-to-end latency, JSON in to JSON out, and session replanning.

Plans. For each size (M and L by default; benchmarks/generator.py) the request's JSON goes
through the stages the service runs, each timed on its own in this process, in wall time
and in CPU time (`time.process_time`: what a loaded machine does not inflate; the solve's
CPU counts every thread it runs):

- validate: the body's bytes to a checked `PlanRequest` (pydantic's strict JSON validation
  with the cross-checks, as api/routers/body.py `parse_body` runs it);
- hand-over: the validated request pickled and unpickled, which the service adds when no
  worker is idle (the intake process validates and pickles, the worker unpickles); an idle
  worker validates the body itself and skips it (api/intake.py `RawRequest`);
- compile: `models.instance.compile_jobs` (cached on the request, so `solver.plan`
  reuses it);
- solve: `solver.plan` less the plan validation it runs inside (the formulation, the LP
  bound, the heuristics and the search are all here);
- check: `solver.validate.validate_plan` (the same validation `solver.plan` ran);
- serialise: the Plan to JSON.

The cyclic collector is paused for all of them, as a solver worker runs a task.

With `--http` the same body is also posted to `POST /v1/plans` of a server started on a
free loopback port (one worker, idle between posts), and `service overhead` is the HTTP
wall time less the plan's own `solve_time_s` (everything the service adds: the HTTP stack,
the validation, the pipes, the serialisation). Each answer's `Server-Timing` header
(api/routers/plans.py `server_timing`) splits that overhead by stage, medians over the
posts: `http` (the client's wall time less the route's `total`: the HTTP stack, both
ways), `read` (the body, in the API process), `intake`, `queue` and `hop` (to the
worker), the worker's `validate` (or `unpickle`), `beyond solve_time_s` (the planner call
less the plan's own `solve_time_s`), `serialise`, `back` (to the API process) and `route`
(the rest of the route's time); with the worker's CPU of its stages and the API process's
CPU per post (/proc).

Sessions (`--sessions-size`, M by default): a `solver.session.PlanningSession` opened on
the instance and planned once (not measured), then per round a batch of `--events` random
deltas (finishes, arrivals, cancellations, resizes, a GPU failing, a node cordoned or
uncordoned, a node added) is applied and the session planned with `--session-limit`; per
round the apply and plan wall times, and the plan's value against a cold solve of the same
state with `--cold-limit`. After each plan's answer the session solves the LP of the state
the plan left for the next plan (`PlanningSession.prepare`; in the service the worker
does, after sending the plan): not in the plan's time, its CPU reported apart. With
`--session-http` the rounds go through the service instead (`POST /v1/sessions`, then per
round `POST .../events` and `POST .../plan` to a server on a loopback port, timed from the
client), with an in-process session kept in step for the cold solves; `plan less its
solve_time_s` is then what the service adds to a session plan (the hand-over to the
worker, committing the plan, writing the session to the store), split into its parts by
the answer's Server-Timing (`overhead part` rows: `session`, `dispatch`, `commit` and
`store` are the session service's own, api/sessions.py). CPU per plan: in process this
process's CPU time and, for the warm plans (solver/warm.py), the median CPU of each of
their steps; through the service the solver worker's and the API process's CPU read from
/proc around each post (`--worker-nice` sets the workers' niceness, 5 by default as in the
service). Percentiles are nearest-rank over the `--rounds` rounds (p99 of fewer than 100
rounds is their maximum). The machine may be shared: figures are what this run saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter

from benchmarks.contend import contended
from benchmarks.load import LocalServer, local_server, percentile
from models import Plan, PlanRequest
from models.events import (
    Event,
    GpuUnhealthy,
    JobCancelled,
    JobFinished,
    JobResized,
    JobSubmitted,
    NodeAdded,
    NodeCordoned,
)

#: The service's validation of a PlanRequest body (api/routers/body.py `parse_body`).
_STRICT: TypeAdapter[PlanRequest] = TypeAdapter(PlanRequest)

STAGES = ("validate", "hand-over", "compile", "solve", "check", "serialise")
#: The parts of the service overhead of one post, in the order of its path (module doc).
SERVICE_PARTS = ("http", "read", "intake", "queue", "hop", "validate", "unpickle",
                 "beyond solve_time_s", "serialise", "back", "route")


@dataclass
class PlanLatency:
    """One size: median seconds per stage over the repeats, and the HTTP figures."""

    size: str
    time_limit_s: float
    body_mib: float
    stages: dict[str, float]
    status: str
    gap: float | None
    http_s: float | None = None
    http_solve_time_s: float | None = None
    #: median CPU seconds per stage
    cpu: dict[str, float] = field(default_factory=dict)
    #: per-post service overheads (wall less solve_time_s) of this server and, with
    #: `--baseline`, of the baseline's, posted alternately
    overheads_s: list[float] = field(default_factory=list)
    baseline_overheads_s: list[float] = field(default_factory=list)
    #: per post of this server: wall seconds of each part of the overhead (SERVICE_PARTS,
    #: from the Server-Timing header), the worker's CPU seconds of its stages, and the API
    #: process's CPU seconds
    service: dict[str, list[float]] = field(default_factory=dict)
    service_cpu: dict[str, list[float]] = field(default_factory=dict)
    api_cpu_s: list[float] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return sum(self.stages.values())

    @property
    def overhead_s(self) -> float | None:
        """HTTP wall time less the solve time the plan reports."""
        if self.http_s is None or self.http_solve_time_s is None:
            return None
        return self.http_s - self.http_solve_time_s


@dataclass
class SessionLatency:
    """Session rounds: apply and plan wall times, values against cold solves."""

    size: str
    events: int
    session_limit_s: float
    cold_limit_s: float
    solver: str = "auto"
    apply_s: list[float] = field(default_factory=list)
    plan_s: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    #: "in-process" (`PlanningSession`) or "http" (the service's /v1/sessions routes)
    via: str = "in-process"
    #: the `solve_time_s` of each session plan
    solve_s: list[float] = field(default_factory=list)
    #: CPU seconds of each session plan: in process, this process's; through the service,
    #: the solver worker's and (apart) the API process's, read from /proc around each post
    plan_cpu_s: list[float] = field(default_factory=list)
    api_cpu_s: list[float] = field(default_factory=list)
    apply_cpu_s: list[float] = field(default_factory=list)
    #: in process: CPU seconds of each step of each warm plan (solver/warm.py), by step
    steps_cpu_s: dict[str, list[float]] = field(default_factory=dict)
    #: in process: plans that started warm, those of them the cold path answered, and
    #: those that started from the last plan's carried compiled jobs and placer
    warm: int = 0
    cold_fallbacks: int = 0
    carried: int = 0
    #: in process: warm plans that solved the LP, and those re-packed toward its targets
    lp: int = 0
    repacked: int = 0
    #: in process: LPs solved between plans (`PlanningSession.prepare`, after each plan's
    #: answer, not in its time) and their CPU seconds
    prepared: int = 0
    prepare_cpu_s: list[float] = field(default_factory=list)
    #: through the service: wall seconds of each part of each plan's overhead (its wall
    #: less its solve_time_s), from the answer's Server-Timing (`service_parts`)
    service: dict[str, list[float]] = field(default_factory=dict)
    #: the machine's 1-minute load average as each plan was posted (the figures' weather)
    loads: list[float] = field(default_factory=list)


@contextlib.contextmanager
def _timer(out: dict[str, float], cpu: dict[str, float], name: str) -> Iterator[None]:
    t0, c0 = time.perf_counter(), time.process_time()
    yield
    out[name] = time.perf_counter() - t0
    cpu[name] = time.process_time() - c0


def time_stages(body: bytes) -> tuple[dict[str, float], dict[str, float], Plan]:
    """Each stage of one request body: wall seconds, CPU seconds, and the plan; with the
    cyclic collector paused throughout, as a solver worker runs a task (api/pool.py)."""
    from solver.gcpause import gc_paused

    with gc_paused():
        return _time_stages(body)


def _time_stages(body: bytes) -> tuple[dict[str, float], dict[str, float], Plan]:
    """`time_stages` (the collector paused by the caller)."""
    from models.instance import compile_jobs, forget_compiled
    from solver import plan
    from solver.validate import validate_plan

    forget_compiled()
    t: dict[str, float] = {}
    c: dict[str, float] = {}
    with _timer(t, c, "validate"):
        request = _STRICT.validate_json(body, strict=True)
    with _timer(t, c, "hand-over"):
        pickle.loads(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
    with _timer(t, c, "compile"):
        compile_jobs(request)
    with _timer(t, c, "solve"):
        result = plan(request)
    with _timer(t, c, "check"):
        bad = validate_plan(request, result)
    if bad:
        raise RuntimeError(f"invalid plan: {bad[0].message}")
    t["solve"] = max(0.0, t["solve"] - t["check"])  # plan() validated once already
    c["solve"] = max(0.0, c["solve"] - c["check"])
    with _timer(t, c, "serialise"):
        result.model_dump_json()
    forget_compiled(request)
    return t, c, result


def _body(size: str, time_limit: float, seed: int) -> bytes:
    from benchmarks.generator import generate

    request = generate(size, seed)
    policy = request.policy.model_copy(update={"time_limit_s": time_limit, "seed": seed})
    return request.model_copy(update={"policy": policy}).model_dump_json(
        exclude_none=True).encode()


def measure_plan(size: str, time_limit: float, seed: int, repeats: int,
                 server: LocalServer | None, baseline_url: str | None = None) -> PlanLatency:
    """Median stage times over `repeats` runs; one HTTP post per repeat to `server` when
    given (and, alternately with it, to `baseline_url`), after one warm-up post to each."""
    body = _body(size, time_limit, seed)
    runs: list[dict[str, float]] = []
    cpus: list[dict[str, float]] = []
    result: Plan | None = None
    for _ in range(repeats):
        t, cpu, result = time_stages(body)
        runs.append(t)
        cpus.append(cpu)
    assert result is not None
    stages = {s: statistics.median(r[s] for r in runs) for s in STAGES}
    row = PlanLatency(size, time_limit, len(body) / 2**20, stages, result.status, result.gap,
                      cpu={s: statistics.median(c[s] for c in cpus) for s in STAGES})
    if server is not None:
        _post_alternately(row, body, time_limit, repeats, server, baseline_url)
    return row


def parse_server_timing(value: str) -> dict[str, tuple[float, float | None]]:
    """A `Server-Timing` header (api/routers/plans.py `server_timing`) as seconds by
    stage: (wall, CPU when the header gives it as `desc="cpu=..."`)."""
    out: dict[str, tuple[float, float | None]] = {}
    for metric in value.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        fields = dict(p.partition("=")[::2] for p in params)
        if not name or "dur" not in fields:
            continue
        cpu = fields.get("desc", "").strip('"').partition("cpu=")[2]
        out[name] = (float(fields["dur"]) / 1000, float(cpu) / 1000 if cpu else None)
    return out


def service_parts(wall_s: float, solve_time_s: float,
                  timing: dict[str, tuple[float, float | None]]) -> dict[str, float]:
    """The service overhead of one post (`wall_s` less `solve_time_s`) split into
    SERVICE_PARTS, in seconds (module doc); the parts add up to the overhead."""
    stages = {k: w for k, (w, _) in timing.items()}
    total = stages.pop("total", wall_s)
    parts = {"http": wall_s - total}
    parts.update((k, v) for k, v in stages.items() if k != "solve")
    parts["beyond solve_time_s"] = stages.get("solve", solve_time_s) - solve_time_s
    parts["route"] = total - sum(stages.values())
    return parts


def _post_alternately(row: PlanLatency, body: bytes, time_limit: float, repeats: int,
                      server: LocalServer, baseline_url: str | None) -> None:
    """Post `body` `repeats` times to `server` (and as often to `baseline_url`,
    alternating which goes first); record walls, overheads and their parts in `row`."""
    import httpx

    targets = {"this": server.url, **({"baseline": baseline_url} if baseline_url else {})}
    walls: dict[str, list[float]] = {k: [] for k in targets}
    solves: dict[str, list[float]] = {k: [] for k in targets}
    with contextlib.ExitStack() as stack:
        clients = {k: stack.enter_context(httpx.Client(base_url=u, timeout=time_limit + 300))
                   for k, u in targets.items()}
        headers = {"Content-Type": "application/json"}
        for client in clients.values():  # warmed up alike
            client.post("/v1/plans", content=body, headers=headers).raise_for_status()
        for i in range(repeats):
            for k in (list(clients) if i % 2 == 0 else list(clients)[::-1]):
                api0 = server.cpu_s()[0]
                t0 = time.perf_counter()
                r = clients[k].post("/v1/plans", content=body, headers=headers)
                walls[k].append(time.perf_counter() - t0)
                api1 = server.cpu_s()[0]
                r.raise_for_status()
                solves[k].append(r.json()["solve_time_s"])
                if k == "this":
                    _record_parts(row, walls[k][-1], solves[k][-1], api1 - api0,
                                  r.headers.get("server-timing", ""))
    row.http_s = statistics.median(walls["this"])
    row.http_solve_time_s = statistics.median(solves["this"])
    row.overheads_s = [w - s for w, s in zip(walls["this"], solves["this"], strict=True)]
    if baseline_url:
        row.baseline_overheads_s = [w - s for w, s in zip(walls["baseline"],
                                                          solves["baseline"], strict=True)]


def _record_parts(row: PlanLatency, wall_s: float, solve_time_s: float, api_cpu_s: float,
                  header: str) -> None:
    """Add one post's overhead parts, its worker CPU by stage and its API CPU to `row`."""
    timing = parse_server_timing(header)
    if not timing:
        return
    for name, value in service_parts(wall_s, solve_time_s, timing).items():
        row.service.setdefault(name, []).append(value)
    for name, (_, cpu) in timing.items():
        if cpu is not None:
            row.service_cpu.setdefault(name, []).append(cpu)
    row.api_cpu_s.append(api_cpu_s)


# ---------------------------------------------------------------- sessions


def random_events(request: PlanRequest, rng: random.Random, n: int, tag: str) -> list[Event]:
    """`n` deltas that apply to `request`: about a third finishes of running jobs, a
    third arrivals (copies of existing jobs, pending), then cancellations of pending jobs,
    resizes, a failing GPU, a node cordoned or uncordoned and a node added."""
    running = [j for j in request.jobs if j.current]
    pending = [j for j in request.jobs if not j.current]
    out: list[Event] = []
    k = max(1, n // 3)
    for j in rng.sample(running, min(k, len(running))):
        out.append(JobFinished(job=j.name))
    for i, j in enumerate(rng.sample(request.jobs, min(k, len(request.jobs)))):
        out.append(JobSubmitted(job=j.model_copy(update={"name": f"{j.name}-{tag}-{i}",
                                                         "current": None})))
    rest = n - len(out)
    picks = rng.sample(pending, min(len(pending), max(0, rest - 3)))
    for i, j in enumerate(picks):
        if i % 2 == 0 or j.gpus is None:
            out.append(JobCancelled(job=j.name))
        else:
            out.append(JobResized(job=j.name, gpus=max(1, j.gpus // 2)
                                  if j.gpus > 1 else 2))
    node = rng.choice(request.cluster.nodes)
    healthy = [g for g in node.gpus if g.healthy]
    if healthy and len(out) < n:
        out.append(GpuUnhealthy(node=node.name, gpu=rng.choice(healthy).index))
    other = rng.choice(request.cluster.nodes)
    if len(out) < n:
        out.append(NodeCordoned(node=other.name, cordoned=other.schedulable))
    if len(out) < n:
        template = rng.choice(request.cluster.nodes)
        out.append(NodeAdded(node=template.model_copy(update={"name": f"node-{tag}"})))
    return out[:n]


def measure_sessions(size: str, events: int, rounds: int, session_limit: float,
                     cold_limit: float, seed: int, solver: str | None = None,
                     server: LocalServer | None = None) -> SessionLatency:
    """Session replanning after `events` deltas, `rounds` times (see the module doc); with
    `server`, through the service's `/v1/sessions` routes of that server, with an
    in-process session kept in step (the same events, the service's plans committed) for
    the cold solves."""
    from benchmarks.generator import generate
    from solver import plan
    from solver.session import PlanningSession
    from solver.validate import validate_plan

    request = generate(size, seed)
    policy = request.policy.model_copy(update={"seed": seed})
    if solver is not None:
        policy = policy.model_copy(update={"solver": solver})
    session = PlanningSession(request.model_copy(update={"policy": policy}))
    remote = _RemoteSession(server, session, cold_limit) if server is not None else None
    if remote is None:
        session.plan(cold_limit)  # the starting plan, committed (not measured)
        session.prepare()  # after its answer, as after every plan (the worker does too)
    rng = random.Random(seed)
    out = SessionLatency(size, events, session_limit, cold_limit, policy.solver,
                         via="in-process" if remote is None else "http")
    for r in range(rounds):
        batch = random_events(session.request, rng, events, f"r{r}")
        out.loads.append(os.getloadavg()[0])
        if remote is not None:
            out.apply_s.append(remote.apply(batch))
            session.apply(batch)
            state = session.planning_request(session_limit)
            warm, plan_s = remote.plan(session_limit)
            for name, value in service_parts(plan_s, warm.solve_time_s,
                                             remote.timing).items():
                out.service.setdefault(name, []).append(value)
            out.plan_cpu_s.append(remote.worker_cpu)
            out.api_cpu_s.append(remote.api_cpu)
            out.apply_cpu_s.append(remote.apply_cpu)
            session.commit(warm, checked=True)
        else:
            t0, c0 = time.perf_counter(), time.process_time()
            session.apply(batch)
            out.apply_s.append(time.perf_counter() - t0)
            out.apply_cpu_s.append(time.process_time() - c0)
            state = session.planning_request(session_limit)
            is_warm = session.warm(session_limit)
            fallbacks = session.memo.cold if session.memo is not None else 0
            carried = session.memo.carried if session.memo is not None else 0
            repacked = session.memo.repacked if session.memo is not None else 0
            t0, c0 = time.perf_counter(), time.process_time()
            warm = session.plan(session_limit)
            plan_s = time.perf_counter() - t0
            out.plan_cpu_s.append(time.process_time() - c0)
            c0 = time.process_time()
            out.prepared += session.prepare()  # the LP for the next plan, after the answer
            out.prepare_cpu_s.append(time.process_time() - c0)
            if is_warm and session.memo is not None:
                out.warm += 1
                out.cold_fallbacks += session.memo.cold - fallbacks
                out.carried += session.memo.carried - carried
                out.repacked += session.memo.repacked - repacked
                out.lp += "relax" in session.memo.last_steps
                for step, cpu in session.memo.last_steps.items():
                    out.steps_cpu_s.setdefault(step, []).append(cpu)
        out.plan_s.append(plan_s)
        out.solve_s.append(warm.solve_time_s)
        if validate_plan(state, warm):
            raise RuntimeError("a session plan failed validation")
        cold = plan(state.model_copy(update={"policy": state.policy.model_copy(
            update={"time_limit_s": cold_limit})}))
        out.ratios.append(warm.objective_value / cold.objective_value
                          if cold.objective_value else 1.0)
        out.statuses.append(warm.status)
    if remote is not None:
        remote.close()
    return out


class _RemoteSession:
    """A session of `server`, opened on `session`'s state and planned once with
    `first_limit` (not measured); `apply` and `plan` time their own posts, and read the
    CPU the server's processes spent on them (`api_cpu`, `worker_cpu`, `apply_cpu`)."""

    def __init__(self, server: LocalServer, session: Any, first_limit: float) -> None:
        import httpx

        self.server = server
        self.api_cpu = self.worker_cpu = self.apply_cpu = 0.0
        #: the last plan's Server-Timing
        self.timing: dict[str, tuple[float, float | None]] = {}
        self.client = httpx.Client(base_url=server.url, timeout=first_limit + 600)
        r = self.client.post("/v1/sessions", content=session.request.model_dump_json(),
                             headers={"Content-Type": "application/json"})
        r.raise_for_status()
        self.path = f"/v1/sessions/{r.json()['id']}"
        session.commit(self.plan(first_limit)[0])

    def apply(self, batch: list[Event]) -> float:
        """Post one event batch; its wall seconds."""
        body = json.dumps({"events": [e.model_dump(mode="json") for e in batch]})
        api0, _ = self.server.cpu_s()
        t0 = time.perf_counter()
        r = self.client.post(f"{self.path}/events", content=body,
                             headers={"Content-Type": "application/json"})
        wall = time.perf_counter() - t0
        self.apply_cpu = self.server.cpu_s()[0] - api0
        r.raise_for_status()
        return wall

    def plan(self, limit: float) -> tuple[Plan, float]:
        """Plan the session with `limit`: the committed plan and the post's wall seconds."""
        api0, worker0 = self.server.cpu_s()
        t0 = time.perf_counter()
        r = self.client.post(f"{self.path}/plan", json={"time_limit_s": limit})
        wall = time.perf_counter() - t0
        api1, worker1 = self.server.cpu_s()
        self.api_cpu, self.worker_cpu = api1 - api0, worker1 - worker0
        r.raise_for_status()
        self.timing = parse_server_timing(r.headers.get("server-timing", ""))
        return Plan.model_validate_json(r.content), wall

    def close(self) -> None:
        """Close the session and the client."""
        self.client.delete(self.path)
        self.client.close()


# ---------------------------------------------------------------- report


def format_plans(rows: list[PlanLatency]) -> str:
    """Stage seconds (wall, share, CPU) as a Markdown table."""
    head = "| size | limit (s) | body (MiB) | " + " | ".join(STAGES) + \
        " | in-process total | HTTP wall | service overhead | status | gap |"
    lines = [head, "|" + "---|" * (len(STAGES) + 8)]
    for r in rows:
        cells = [f"{1000 * r.stages[s]:,.0f} ms ({100 * r.stages[s] / r.total_s:.0f}%)"
                 + (f", CPU {1000 * r.cpu[s]:,.0f} ms" if s in r.cpu else "")
                 for s in STAGES]
        http = "-" if r.http_s is None else f"{r.http_s:.2f} s"
        over = "-" if r.overhead_s is None else f"{1000 * r.overhead_s:,.0f} ms"
        gap = "-" if r.gap is None else f"{100 * r.gap:.2f}%"
        lines.append(f"| {r.size} | {r.time_limit_s:g} | {r.body_mib:.1f} | "
                     + " | ".join(cells)
                     + f" | {r.total_s:.2f} s | {http} | {over} | {r.status} | {gap} |")
    if any(r.service for r in rows):
        lines += ["", format_service(rows)]
    compared = [r for r in rows if r.baseline_overheads_s]
    if compared:
        lines += ["", "Service overhead per post (wall less solve_time_s), posted alternately:",
                  "| size | server | median | min | max |", "|---|---|---:|---:|---:|"]
        for r in compared:
            for name, v in (("this", r.overheads_s), ("baseline", r.baseline_overheads_s)):
                lines.append(f"| {r.size} | {name} | {1000 * statistics.median(v):,.0f} ms | "
                             f"{1000 * min(v):,.0f} ms | {1000 * max(v):,.0f} ms |")
    return "\n".join(lines)


def format_service(rows: list[PlanLatency]) -> str:
    """The service overhead's parts (module doc) as a Markdown table: per part the median
    wall ms over the posts, its share of the overhead's median, and the worker's median
    CPU ms where known; the parts' medians need not add up to the overhead's."""
    parts = [p for p in SERVICE_PARTS if any(p in r.service for r in rows)]
    lines = ["Service overhead by part, median over the posts (share of the median overhead; "
             "worker CPU):",
             "| size | posts | overhead | " + " | ".join(parts) + " | API CPU per post |",
             "|" + "---|" * (len(parts) + 4)]
    for r in rows:
        if not r.service:
            continue
        over = statistics.median(r.overheads_s)
        cells = []
        for p in parts:
            if p not in r.service:
                cells.append("-")
                continue
            wall = statistics.median(r.service[p])
            cpu_key = "solve" if p == "beyond solve_time_s" else p
            cpu = (f", CPU {1000 * statistics.median(r.service_cpu[cpu_key]):,.1f}"
                   if cpu_key in r.service_cpu and p != "beyond solve_time_s" else "")
            cells.append(f"{1000 * wall:,.1f} ({100 * wall / over:.0f}%){cpu}"
                         if over > 0 else f"{1000 * wall:,.1f}{cpu}")
        api = (f"{1000 * statistics.median(r.api_cpu_s):,.0f} ms" if r.api_cpu_s else "-")
        lines.append(f"| {r.size} | {len(r.overheads_s)} | {1000 * over:,.0f} ms | "
                     + " | ".join(cells) + f" | {api} |")
    return "\n".join(lines)


def format_sessions(s: SessionLatency) -> str:
    """Percentiles of the session rounds."""
    def ms(v: float) -> str:
        return f"{1000 * v:,.1f} ms"

    beyond = [p - v for p, v in zip(s.plan_s, s.solve_s, strict=True)]
    return "\n".join([
        f"Sessions at {s.size} ({s.via}): {len(s.plan_s)} rounds of {s.events} events, plan "
        f"limit {s.session_limit_s:g} s, cold solve {s.cold_limit_s:g} s, solver {s.solver}",
        "| figure | p50 | p99 | max |", "|---|---:|---:|---:|",
        f"| apply events | {ms(percentile(s.apply_s, 50))} | {ms(percentile(s.apply_s, 99))}"
        f" | {ms(max(s.apply_s))} |",
        f"| session plan | {ms(percentile(s.plan_s, 50))} | {ms(percentile(s.plan_s, 99))}"
        f" | {ms(max(s.plan_s))} |",
        f"| plan less its solve_time_s | {ms(percentile(beyond, 50))} | "
        f"{ms(percentile(beyond, 99))} | {ms(max(beyond))} |",
        f"| value / cold value | {percentile(s.ratios, 50):.4f} | "
        f"min {min(s.ratios):.4f} | |",
        *_cpu_rows(s),
        *([f"| machine load (1 min) at each plan | {percentile(s.loads, 50):.1f} | "
           f"{percentile(s.loads, 99):.1f} | {max(s.loads):.1f} |"] if s.loads else []),
        *[f"| overhead part: {name} | {ms(percentile(v, 50))} | {ms(percentile(v, 99))} | "
          f"{ms(max(v))} |" for name, v in s.service.items()],
        f"statuses: {', '.join(sorted(set(s.statuses)))}"
        + (f"; {s.warm} of {len(s.plan_s)} plans warm, {s.cold_fallbacks} of them answered "
           f"by the cold path, {s.carried} started from the last plan's carried state, "
           f"{s.lp} solved the LP, {s.repacked} re-packed toward its targets; "
           f"{s.prepared} LPs solved between plans"
           if s.via == "in-process" else ""),
        *(["CPU per step of the warm plans, median: " + ", ".join(
            f"{k} {ms(percentile(v, 50))}" for k, v in s.steps_cpu_s.items())]
          if s.steps_cpu_s else []),
    ])


def _cpu_rows(s: SessionLatency) -> list[str]:
    """The CPU rows of the session table (module doc)."""
    def ms(v: float) -> str:
        return f"{1000 * v:,.1f} ms"

    rows = [("apply events, CPU" + (" (API process)" if s.via == "http" else ""),
             s.apply_cpu_s),
            ("session plan, CPU" + (" (solver worker)" if s.via == "http" else ""),
             s.plan_cpu_s),
            ("LP between plans, CPU (after the answer)", s.prepare_cpu_s)]
    if s.via == "http":
        rows.append(("session plan, CPU (API process)", s.api_cpu_s))
    return [f"| {name} | {ms(percentile(v, 50))} | {ms(percentile(v, 99))} | "
            f"{ms(max(v))} |" for name, v in rows if v]


def latency_command(
    sizes: Annotated[str, typer.Option(help="Comma-separated sizes of the plan runs.")] =
        "M,L",
    time_limits: Annotated[str, typer.Option(
        help="policy.time_limit_s per size, comma-separated (one value: all sizes).")] =
        "1,3",
    repeats: Annotated[int, typer.Option(min=1, max=20, help="Runs per size.")] = 3,
    http: Annotated[bool, typer.Option(
        help="Also post each body to a server started on a loopback port.")] = True,
    sessions_size: Annotated[str | None, typer.Option(
        help="Size of the session rounds ('' to skip).")] = "M",
    events: Annotated[int, typer.Option(min=1, max=1000, help="Events per round.")] = 20,
    rounds: Annotated[int, typer.Option(min=1, max=200, help="Session rounds.")] = 10,
    session_limit: Annotated[float, typer.Option(
        min=0.05, help="Time limit of each session plan (s).")] = 0.25,
    cold_limit: Annotated[float, typer.Option(
        min=0.1, help="Time limit of the cold solve each round is compared with (s).")] = 5.0,
    session_solver: Annotated[str | None, typer.Option(
        help="policy.solver of the session plans and cold solves (default: the "
             "instance's, auto).")] = None,
    seed: Annotated[int, typer.Option(help="Instance and event seed.")] = 0,
    contend: Annotated[int, typer.Option(
        min=0, max=256, help="Busy processes pinned to the cores during the runs.")] = 0,
    session_http: Annotated[bool, typer.Option(
        help="Run the session rounds through the service's /v1/sessions routes (a server "
             "on a loopback port) instead of in process.")] = False,
    worker_nice: Annotated[int, typer.Option(
        min=0, max=19, help="Niceness of the server's solver workers (the service's "
                            "default is 5; 0 competes with other processes as equals).")] = 5,
    baseline: Annotated[Path | None, typer.Option(
        help="Also post each body, alternately, to a server run from the gpuplan checkout "
             "at this path (e.g. a worktree of main): both services' overheads.")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the figures as JSON.")] = None,
) -> None:
    """Time JSON-in to JSON-out by stage at each size, and session replanning."""
    from benchmarks.generator import SIZES

    size_list = [s.strip().upper() for s in sizes.split(",") if s.strip()]
    bad = [s for s in size_list + ([sessions_size.upper()] if sessions_size else [])
           if s not in SIZES]
    if bad:
        raise typer.BadParameter(f"unknown size: {', '.join(bad)}", param_hint="--sizes")
    if session_solver not in (None, "auto", "heuristic", "cp_sat", "milp"):
        raise typer.BadParameter(f"unknown solver {session_solver!r}",
                                 param_hint="--session-solver")
    try:
        limits = [float(x) for x in time_limits.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"not numbers: {time_limits!r}",
                                 param_hint="--time-limits") from None
    if len(limits) == 1 or not size_list:
        limits = limits[:1] * len(size_list)
    if len(limits) != len(size_list) or min(limits, default=1) <= 0:
        raise typer.BadParameter("one positive limit per size", param_hint="--time-limits")
    rows: list[PlanLatency] = []
    sess: SessionLatency | None = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(contended(contend))
        base_url = None
        server_settings: dict[str, Any] = {
            "workers": 1, "queue_size": 2,
            "max_time_limit_s": max([*limits, cold_limit, session_limit]) + 1,
            "max_nodes": 100000, "max_gpus": 100000, "max_jobs": 100000,
            "max_body_bytes": 512 * 2**20, "kill_grace_s": 120, "worker_nice": worker_nice}
        server: LocalServer | None = None
        if (http and size_list) or (session_http and sessions_size):
            server = stack.enter_context(local_server(**server_settings))
            if baseline is not None:
                base_url = stack.enter_context(local_server(
                    root=baseline.resolve(), **server_settings)).url
        for size, limit in zip(size_list, limits, strict=True):
            rows.append(measure_plan(size, limit, seed, repeats,
                                     server if http else None, base_url))
            typer.echo(format_plans(rows[-1:]).splitlines()[2], err=True)
        if sessions_size:
            sess = measure_sessions(sessions_size.upper(), events, rounds, session_limit,
                                    cold_limit, seed, session_solver,
                                    server if session_http else None)
    command = (f"gpuplan bench latency --sizes {','.join(size_list)} --time-limits "
               f"{','.join(f'{x:g}' for x in limits)} --repeats {repeats}"
               + ("" if http else " --no-http")
               + f" --sessions-size '{sessions_size or ''}' --events {events} --rounds "
               f"{rounds} --session-limit {session_limit:g} --cold-limit {cold_limit:g} "
               f"--seed {seed}" + (f" --contend {contend}" if contend else "")
               + (f" --session-solver {session_solver}" if session_solver else "")
               + (f" --baseline {baseline}" if baseline is not None and http else "")
               + (" --session-http" if session_http else "")
               + (f" --worker-nice {worker_nice}" if worker_nice != 5 else ""))
    parts = [f"Command: `{command}`", "", format_plans(rows)] if rows else \
        [f"Command: `{command}`"]
    if sess is not None:
        parts += ["", format_sessions(sess)]
    typer.echo("\n".join(parts))
    if out is not None:
        data: dict[str, Any] = {"command": command, "contend": contend,
                                "plans": [{**asdict(r), "total_s": r.total_s,
                                           "overhead_s": r.overhead_s} for r in rows],
                                "sessions": asdict(sess) if sess is not None else None}
        out.write_text(json.dumps(data, indent=2) + "\n")
