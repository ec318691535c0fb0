"""Wires config, monitor, policy, conductor, API and control socket into one running daemon."""

from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI

from syshaxd import __version__
from syshaxd.config import LoadedConfig

log = logging.getLogger("syshaxd")


def run_daemon(loaded: LoadedConfig) -> int:
    """Serve until stopped. (Skeleton: health only, until the conductor lands.)"""
    app = FastAPI(title="syshax", version=__version__)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "starting", "detail": "conductor not built yet"}

    svc = loaded.config.services.conductor
    uvicorn.run(app, host=svc.host, port=svc.port, log_level="warning")
    return 0
