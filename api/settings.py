"""Service settings, read from the environment (prefix `GPUPLAN_`) when the app is created.

Nothing here runs at import: `create_app()` builds a `Settings()` at start-up (or takes one
from its caller, e.g. `gpuplan serve` or a test).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Limits, pool sizes, storage and auth of the gpuplan service."""

    model_config = SettingsConfigDict(env_prefix="GPUPLAN_", extra="ignore")

    max_time_limit_s: float = Field(
        default=60.0, gt=0, description="Server cap on policy.time_limit_s (seconds)."
    )
    kill_grace_s: float = Field(
        default=5.0, ge=0,
        description="A solve still running this long after its time limit is killed.",
    )
    workers: int = Field(default=2, ge=1, le=256, description="Solver worker processes.")
    intake_workers: int = Field(
        default=1, ge=1, le=64,
        description="Processes that parse and validate plan request bodies (off the API "
                    "process, so that large bodies do not hold up other requests).")
    queue_size: int = Field(
        default=16, ge=0, description="Solves that may wait for a worker; beyond it, 429."
    )
    solver_threads: int | None = Field(
        default=None, ge=1,
        description="Cap on policy.threads per solve (default: CPU cores / workers).",
    )
    worker_nice: int = Field(
        default=5, ge=0, le=19,
        description="Scheduling niceness of worker processes, so the API stays responsive.",
    )
    planner: str = Field(
        default="solver:plan",
        description="Import path of the planning function run by the workers ('module:name'). "
                    "Tests point it at a fake.",
    )
    db_path: Path = Field(default=Path("gpuplan.db"), description="SQLite file of async solves.")
    db_url: str | None = Field(
        default=None,
        description="Store of async solves: sqlite:///PATH or postgresql://USER:PW@HOST/DB "
                    "(replicas sharing one PostgreSQL answer for each other's solves); "
                    "default sqlite:///<db_path>.")
    db_pool_size: int = Field(default=4, ge=1, le=64, description="PostgreSQL connections.")
    lease_s: float = Field(
        default=15.0, ge=1,
        description="A live solve whose replica stops renewing it this long is marked failed.")
    shutdown_grace_s: float = Field(
        default=20.0, ge=0,
        description="On SIGTERM, running solves get this long to finish before they fail.")
    shutdown_delay_s: float = Field(
        default=2.0, ge=0,
        description="On SIGTERM, keep answering (unready) at least this long, so the load "
                    "balancer stops routing here before the listener closes.")
    ttl_s: float = Field(default=86400.0, gt=0, description="Async solve records expire after.")
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024,
        description="Larger bodies get 413 (an L-size request or a big kubectl NodeList fits).",
    )
    max_nodes: int = Field(default=2000, ge=1)
    max_gpus: int = Field(default=16384, ge=1)
    max_jobs: int = Field(default=20000, ge=1)
    api_token: str | None = Field(
        default=None, description="When set, every /v1 route needs 'Authorization: Bearer'."
    )
    cors_origins: str = Field(
        default="", description="Comma-separated allowed CORS origins; none by default."
    )
    retry_after_s: int = Field(default=5, ge=1, description="Retry-After sent with 429.")

    @field_validator("api_token")
    @classmethod
    def _empty_token_is_none(cls, v: str | None) -> str | None:
        return v or None

    @property
    def cors_origin_list(self) -> list[str]:
        """The configured CORS origins as a list (empty = CORS off)."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def database_url(self) -> str:
        """The store's URL: `db_url`, else the SQLite file `db_path`."""
        return self.db_url or f"sqlite:///{self.db_path}"

    @property
    def threads_per_solve(self) -> int:
        """Threads one solve may use: the configured cap or the cores shared by the pool."""
        if self.solver_threads is not None:
            return self.solver_threads
        return max(1, (os.cpu_count() or 1) // self.workers)
