"""`gpuplan serve`: run the HTTP service with uvicorn.

Other settings (limits, database path, token, CORS) come from `GPUPLAN_*` environment
variables; see `api/settings.py`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from api.cli.common import fail, format_validation_error


def serve(
    host: Annotated[str, typer.Option(help="Address to bind (0.0.0.0 in a container).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[int | None, typer.Option(
        min=1, max=256, help="Solver worker processes (default: GPUPLAN_WORKERS or 2).")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the planner API (docs at /docs, health at /healthz)."""
    import uvicorn

    from api.app import create_app
    from api.settings import Settings

    try:
        settings = Settings() if workers is None else Settings(workers=workers)
    except ValidationError as e:
        fail(f"invalid GPUPLAN_* setting: {format_validation_error(e)}")
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
