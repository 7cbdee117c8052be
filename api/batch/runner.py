"""The batch runner: inputs x variants -> validated requests -> backend -> plan files + rows.

Requests are read, edited and validated one at a time in this process and handed to the
backend lazily; outcomes are written to `<out>/<name>[@<variant>].plan.json` as soon as they
come back and then dropped, so memory does not grow with the number of requests. A request
that cannot be read, validated or solved becomes a failed Row (with its file, line and field
path) and the batch goes on. Ctrl-C ends the batch with `Summary.interrupted` set; the plans
already written stay.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from api.batch.backends import Backend
from api.batch.inputs import Source, count, iter_sources
from api.batch.summary import FAILED, Row, Summary
from api.batch.sweep import BASE, EditError, Variant, apply
from api.batch.task import SolveFn, SolveOutcome, SolveTask
from models import Plan, PlanRequest
from solver.validate import validate_plan

log = logging.getLogger(__name__)

PLAN_SUFFIX = ".plan.json"


def default_threads(jobs: int, cpus: int | None = None) -> int:
    """Threads per solve so that `jobs` concurrent solves fill, not oversubscribe, the CPUs."""
    return max(1, (cpus or os.cpu_count() or 1) // max(1, jobs))


def output_name(name: str, variant: str) -> str:
    """`name` for the base variant, `name@variant` otherwise."""
    return f"{name}@{variant}" if variant else name


def format_validation_error(err: ValidationError, limit: int = 3) -> str:
    """`field.path: message; ...` for the first `limit` errors of a pydantic error."""
    parts = []
    for e in err.errors()[:limit]:
        loc = ".".join(str(x) for x in e["loc"]) or "(root)"
        parts.append(f"{loc}: {e['msg']}")
    if len(err.errors()) > limit:
        parts.append(f"(+{len(err.errors()) - limit} more)")
    return "; ".join(parts)


@dataclass(frozen=True)
class BatchOptions:
    """How to run a batch.

    `threads` caps each solve's `policy.threads` (a request asking for fewer keeps its own);
    None means `default_threads(jobs)`.
    """

    out_dir: Path
    jobs: int = 1
    threads: int | None = None
    resume: bool = False
    variants: Sequence[Variant] = (BASE,)

    @property
    def solve_threads(self) -> int:
        """The thread cap applied to every request."""
        return self.threads or default_threads(self.jobs)


@dataclass(frozen=True)
class _Pending:
    name: str
    variant: str
    origin: str
    path: Path


@dataclass
class _Batch:
    """One run's state: what is in flight and where rows go."""

    files: Sequence[Path]
    options: BatchOptions
    on_row: Callable[[Row], None]
    summary: Summary
    pending: dict[int, _Pending] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)

    def emit(self, row: Row) -> None:
        self.summary.add(row)
        self.on_row(row)

    def fail(self, name: str, variant: str, origin: str, error: str) -> None:
        self.emit(Row(name=name, variant=variant, origin=origin, status=FAILED, error=error))

    def tasks(self) -> Iterator[SolveTask]:
        """The solvable requests, lazily; bad or resumed ones are reported on the way."""
        key = 0
        for source in iter_sources(self.files):
            for variant in self.options.variants:
                key += 1
                task = self._prepare(key, source, variant)
                if task is not None:
                    yield task

    def _prepare(self, key: int, source: Source, variant: Variant) -> SolveTask | None:
        label, origin = variant.label, source.origin
        out = output_name(source.name, label)
        if out in self.names:
            self.fail(source.name, label, origin,
                      f"duplicate output name {out!r}: an earlier input has the same stem")
            return None
        self.names.add(out)
        if source.error is not None:
            self.fail(source.name, label, origin, source.error)
            return None
        try:
            request = PlanRequest.model_validate(apply(source.document, variant))
        except EditError as e:
            self.fail(source.name, label, origin, f"cannot apply the variant: {e}")
            return None
        except ValidationError as e:
            self.fail(source.name, label, origin, format_validation_error(e))
            return None
        cap = self.options.solve_threads
        request.policy.threads = min(request.policy.threads or cap, cap)
        path = self.options.out_dir / f"{out}{PLAN_SUFFIX}"
        if self.options.resume:
            existing = _valid_plan(request, path)
            if existing is not None:
                self.emit(Row.from_plan(existing, name=source.name, variant=label,
                                        origin=origin, wall_s=None, plan_path=path,
                                        resumed=True))
                return None
        self.pending[key] = _Pending(source.name, label, origin, path)
        return SolveTask(key, request)

    def collect(self, outcome: SolveOutcome) -> None:
        """Write an outcome's plan and report its row."""
        p = self.pending.pop(outcome.key)
        if outcome.plan is None:
            self.fail(p.name, p.variant, p.origin, outcome.error or "no plan returned")
            return
        try:
            _write_atomic(p.path, outcome.plan.model_dump_json(indent=2) + "\n")
        except OSError as e:
            self.fail(p.name, p.variant, p.origin, f"cannot write {p.path}: {e.strerror or e}")
            return
        self.emit(Row.from_plan(outcome.plan, name=p.name, variant=p.variant, origin=p.origin,
                                wall_s=outcome.wall_s, plan_path=p.path))


def _valid_plan(request: PlanRequest, path: Path) -> Plan | None:
    """The plan already at `path` when it parses and is valid for `request`, else None."""
    if not path.is_file():
        return None
    try:
        plan = Plan.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        log.info("existing plan %s is unreadable; solving again", path)
        return None
    violations = validate_plan(request, plan)
    if violations:
        log.info("existing plan %s is invalid (%s); solving again", path, violations[0].message)
        return None
    return plan


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so an interrupted batch leaves no half plan."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def run_batch(
    files: Sequence[Path],
    options: BatchOptions,
    *,
    solve: SolveFn,
    backend: Backend,
    on_row: Callable[[Row], None] | None = None,
) -> Summary:
    """Solve every request of `files` under every variant; return the summary.

    `files` are request / JSON Lines files (see `inputs.expand`); `on_row` is called for each
    result as it is known (progress display, CSV). Ctrl-C returns the partial summary with
    `interrupted` set instead of raising.
    """
    options.out_dir.mkdir(parents=True, exist_ok=True)
    summary = Summary(variants=[v.label for v in options.variants],
                      expected=count(files) * len(options.variants))
    batch = _Batch(files, options, on_row or (lambda _row: None), summary)
    start = time.perf_counter()
    outcomes: Generator[SolveOutcome, None, None] = _as_generator(
        backend.solve_all(batch.tasks(), solve))
    try:
        for outcome in outcomes:
            batch.collect(outcome)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            outcomes.close()
        summary.elapsed_s = time.perf_counter() - start
    return summary


def _as_generator(it: Iterator[SolveOutcome]) -> Generator[SolveOutcome, None, None]:
    """Backends return generators; wrap any other iterator so that it can be closed."""
    if isinstance(it, Generator):
        return it
    return (x for x in it)
