"""Run the app under uvicorn so that SIGTERM drains the replica before the listener closes.

Plain uvicorn stops listening as soon as it gets SIGTERM, so a request routed to the replica
in the moments before the load balancer notices gets "connection refused". Here the first
SIGTERM only starts `SolveService.drain` (the replica turns unready and refuses new solves
with 503 while it keeps answering everything else); when the drain ends, uvicorn shuts down
as usual. A second SIGTERM, or SIGINT, stops at once (live solves are then failed).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

log = logging.getLogger("gpuplan.api")


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM drains the app's solve service first."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_started = False
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve, remembering the loop the signal handler schedules the drain on."""
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First SIGTERM: drain, then exit; anything else: uvicorn's own handling."""
        if sig == signal.SIGTERM and not self._drain_started and self._loop is not None \
                and not self.should_exit:
            self._drain_started = True
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        service = getattr(self._app.state, "service", None)
        try:
            if service is not None:
                await service.drain()
        except Exception:  # exit anyway: the lifespan fails whatever is left
            log.exception("drain failed")
        finally:
            self.should_exit = True


def serve_app(app: FastAPI, *, host: str, port: int, log_level: str) -> None:
    """Run `app` until it is told to stop (see the module docstring)."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level)
    DrainingServer(config, app).run()
