"""What the box says about itself on the API port: the models it serves, its health, its metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from syshaxd import __version__
from syshaxd.conductor import Conductor, LoadFormat, get_load_body
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.snapshot import EngineState

#: Seconds a merged /v1/models answer is reused (clients ask it on every start).
MODELS_TTL = 5.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class ModelList:
    """The models every engine serves, merged by id, each naming the engines that serve it."""

    def __init__(self, engines: Sequence[EngineClient]) -> None:
        self.engines = tuple(engines)
        self._at = 0.0
        self._body: dict[str, Any] | None = None

    async def get(self) -> dict[str, Any]:
        """The merged list (cached for :data:`MODELS_TTL` s).

        Raises:
            ApiError: 503 when no engine answered.
        """
        if self._body is not None and time.monotonic() - self._at < MODELS_TTL:
            return self._body
        answers = await asyncio.gather(*(e.get_json("/v1/models", timeout=3.0) for e in self.engines))
        seen: dict[str, dict[str, Any]] = {}
        for engine, answer in zip(self.engines, answers, strict=True):
            data = answer.get("data") if isinstance(answer, dict) else None
            for item in data if isinstance(data, list) else []:
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    entry = seen.setdefault(item["id"], {**item, "engines": []})
                    entry["engines"].append(engine.name)
        if not seen:
            raise ApiError(503, "no engine answered GET /v1/models", type="service_unavailable")
        self._body, self._at = {"object": "list", "data": list(seen.values())}, time.monotonic()
        return self._body


def health_body(conductor: Conductor) -> tuple[dict[str, Any], int]:
    """``/health``: ok when every engine is up, degraded (with reasons) when some are not, 503
    when none can serve or the daemon is stopping."""
    reasons: list[str] = []
    engines: dict[str, Any] = {}
    snap = conductor.live_snapshot()
    for view in snap.engines:
        engines[view.name] = {"device": view.device, "state": view.state.value,
                              "enabled": view.enabled, "draining": view.draining}
        if view.state is not EngineState.UP:
            reasons.append(f"{view.name} is {view.state.value}" + (f": {view.last_error}" if view.last_error else ""))
        elif not view.enabled or view.draining:
            reasons.append(f"{view.name} is {'disabled' if not view.enabled else 'draining'}")
    serving = any(view.usable for view in snap.engines) and conductor.accepting
    if conductor.box_draining is not None:
        # A router must stop sending new work here: 503 while what is in flight finishes.
        reasons.append(f"draining ({conductor.box_draining}): finishing {conductor.books.open_count} requests")
        serving = False
    elif not conductor.accepting:
        reasons.append("shutting down")
    status = ("ok" if not reasons and serving else "degraded" if serving
              else "draining" if conductor.box_draining is not None else "down")
    body = {"status": status, "reasons": reasons, "engines": engines, "version": __version__}
    return body, 200 if serving else 503


def info_router(conductor: Conductor, engines: Sequence[EngineClient],
                load_format: LoadFormat = "vllm-router") -> APIRouter:
    """``GET /v1/models``, ``/health``, ``/metrics``, and the load a cluster router reads
    (``/get_load``, ``/load``)."""
    router = APIRouter()
    models = ModelList(engines)

    @router.get("/v1/models")
    async def list_models() -> JSONResponse:
        """The models the engines serve."""
        return JSONResponse(await models.get())

    @router.get("/health")
    async def health() -> JSONResponse:
        """ok when every engine is up; degraded (with reasons) when some are not; 503 when none can serve."""
        body, status = health_body(conductor)
        return JSONResponse(body, status_code=status)

    @router.get("/get_load")
    async def get_load() -> JSONResponse:
        """The whole box's load for a cluster router: ``{"load": N}`` (vllm-router; N = waiting +
        running requests) or, with ``services.conductor.load_format: sglang``, SGLang's list per
        data-parallel rank."""
        return JSONResponse(get_load_body(conductor.box_load(), load_format))

    @router.get("/load")
    async def load() -> JSONResponse:
        """vLLM's ``{"server_load": N}``: requests the box holds (waiting and running)."""
        return JSONResponse({"server_load": conductor.box_load().load})

    @router.get("/get_model_info")
    async def get_model_info() -> JSONResponse:
        """The SGLang model gateway's model card of a worker: the model the box serves."""
        model = conductor.vllm_gauges.model_name
        return JSONResponse({"model_path": model, "tokenizer_path": model, "served_model_name": model,
                             "is_generation": True})

    @router.get("/get_server_info")
    async def get_server_info() -> JSONResponse:
        """The SGLang model gateway's server info of a worker: one data-parallel rank (the box),
        its engines, and its load now."""
        model, load = conductor.vllm_gauges.model_name, conductor.box_load()
        return JSONResponse({
            "model_path": model, "served_model_name": model, "tp_size": 1, "dp_size": 1, "version": __version__,
            "server": "syshax", "engines": [{"name": e.name, "device": e.device} for e in engines],
            "internal_states": [{"num_reqs": load.load, "num_waiting_reqs": load.waiting}],
        })

    @router.get("/metrics")
    async def metrics() -> Response:
        """The conductor's own Prometheus metrics (syshax_*), and the box's load as vLLM's
        ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``."""
        return Response(conductor.exposition(), media_type=PROMETHEUS_TEXT)

    return router
