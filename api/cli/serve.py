"""`gpuplan serve`: run the HTTP service with uvicorn.

Other settings (limits, database, token, CORS) come from `GPUPLAN_*` environment
variables; see `api/settings.py` (and `api/k8s/state.py` for `GPUPLAN_K8S_*`). The store
is opened (and migrated) before serving, so a database that cannot be used stops the
command with one line. The first SIGTERM drains the replica (see `api/serving.py`).
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
    k8s_watch: Annotated[bool, typer.Option(
        "--k8s-watch", help="List and watch Kubernetes Nodes and Pods for the scheduler "
        "extender (in-cluster config or kubeconfig; default: GPUPLAN_K8S_WATCH).")] = False,
) -> None:
    """Serve the planner API (docs at /docs, health at /healthz)."""
    from api.app import create_app
    from api.k8s import K8sSettings, make_api
    from api.serving import serve_app
    from api.settings import Settings
    from api.store import StoreError, open_store

    try:
        settings = Settings() if workers is None else Settings(workers=workers)
        k8s = K8sSettings(watch=True) if k8s_watch else K8sSettings()
    except ValidationError as e:
        fail(f"invalid GPUPLAN_* setting: {format_validation_error(e)}")
    if k8s.watch:
        try:
            make_api(k8s.kubeconfig, k8s.context)
        except Exception as e:  # the client raises ConfigException, OSError, ...
            fail(f"--k8s-watch: no Kubernetes configuration ({e})")
    try:
        open_store(settings.database_url, 1).close()  # migrate, or refuse in one line
    except StoreError as e:
        fail(str(e))
    app = create_app(settings)
    app.state.k8s_settings = k8s
    serve_app(app, host=host, port=port, log_level=log_level)
