"""What the box says about itself on the API port: its models, health, metrics and load, and its docs.

Each is a plain handler on the API's own server (:mod:`syshaxd.api.server`), as the completion
routes are: it answers ``GET`` (and ``HEAD``, whose body the server leaves out) at once, from
what the conductor holds -- only ``/v1/models`` waits, on the engines, and keeps their merged
answer a few seconds. Another method is a 405. The table :data:`INFO` says what each route
is; the OpenAPI document (:mod:`syshaxd.api.openapi`) and the docs pages are built from it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from syshaxd import __version__
from syshaxd.api import openapi
from syshaxd.api.openapi import Route
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.api.server import Handler
from syshaxd.conductor import Conductor, LoadFormat, get_load_body
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.snapshot import EngineState

#: Seconds a merged /v1/models answer is reused (clients ask it on every start).
MODELS_TTL = 5.0
PROMETHEUS_TEXT = b"text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = b"application/json"
HTML_TYPE = b"text/html; charset=utf-8"
#: On every answer of the box's own routes: who answers (``syshax calibrate`` refuses to profile
#: the box as if it were one engine).
WHO = (b"x-syshax", f"syshaxd/{__version__}".encode())


#: The box's own routes, in the order the docs list them.
INFO = (
    Route("/v1/models", "The models the engines serve, merged by id, each naming the engines that serve it",
          statuses=(200, 503)),
    Route("/health", "ok when every engine is up; degraded (with reasons) when some are not; 503 when none "
                     "can serve or the box is draining", statuses=(200, 503)),
    Route("/metrics", "The conductor's own Prometheus metrics (syshax_*), and the box's load as vLLM's "
                      "vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc",
          media="text/plain"),
    Route("/get_load", 'The whole box\'s load for a cluster router: {"load": N} (vllm-router; N = waiting + '
                       "running requests) or, with services.conductor.load_format: sglang, SGLang's list per "
                       "data-parallel rank"),
    Route("/load", 'vLLM\'s {"server_load": N}: requests the box holds (waiting and running)'),
    Route("/get_model_info", "The SGLang model gateway's model card of a worker: the model the box serves"),
    Route("/get_server_info", "The SGLang model gateway's server info of a worker: one data-parallel rank "
                              "(the box), its engines, and its load now"),
)
#: The document and the pages that show it (not in the document themselves).
DOCS = ("/openapi.json", "/docs", "/redoc")


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


class Info:
    """The box's own routes on the API port, as handlers by path."""

    def __init__(self, conductor: Conductor, engines: Sequence[EngineClient],
                 load_format: LoadFormat = "vllm-router") -> None:
        self.conductor = conductor
        self.engines = tuple(engines)
        self.load_format = load_format
        self.models = ModelList(engines)
        self._document = json.dumps(openapi.document(INFO), separators=(",", ":")).encode()

    @property
    def paths(self) -> frozenset[str]:
        """The paths it serves."""
        return frozenset(route.path for route in INFO) | frozenset(DOCS)

    def handlers(self) -> dict[str, Handler]:
        """A handler per path."""
        c = self.conductor
        answers: dict[str, Callable[[], tuple[int, bytes, bytes]]] = {
            "/health": lambda: _json(*_status_first(health_body(c))),
            "/metrics": lambda: (200, PROMETHEUS_TEXT, c.exposition()),
            "/get_load": lambda: _json(200, get_load_body(c.box_load(), self.load_format)),
            "/load": lambda: _json(200, {"server_load": c.box_load().load}),
            "/get_model_info": lambda: _json(200, self._model_info()),
            "/get_server_info": lambda: _json(200, self._server_info()),
            "/openapi.json": lambda: (200, JSON_TYPE, self._document),
            "/docs": lambda: (200, HTML_TYPE, openapi.SWAGGER_PAGE),
            "/redoc": lambda: (200, HTML_TYPE, openapi.REDOC_PAGE),
        }
        routes: dict[str, Handler] = {path: _at_once(path, answer) for path, answer in answers.items()}
        routes["/v1/models"] = self._list_models
        return routes

    def _list_models(self, request: Request, response: Response) -> Awaitable[None]:
        _only_get(request)

        async def answer() -> None:
            _send(response, *_json(200, await self.models.get()))

        return answer()

    def _model_info(self) -> dict[str, Any]:
        model = self.conductor.vllm_gauges.model_name
        return {"model_path": model, "tokenizer_path": model, "served_model_name": model, "is_generation": True}

    def _server_info(self) -> dict[str, Any]:
        model, load = self.conductor.vllm_gauges.model_name, self.conductor.box_load()
        engines = [{"name": e.name, "device": e.device, "url": e.spec.url} for e in self.engines]
        return {"model_path": model, "served_model_name": model, "tp_size": 1, "dp_size": 1, "version": __version__,
                "server": "syshax", "engines": engines,
                "internal_states": [{"num_reqs": load.load, "num_waiting_reqs": load.waiting}]}


def _at_once(path: str, answer: Callable[[], tuple[int, bytes, bytes]]) -> Handler:
    def handle(request: Request, response: Response) -> None:
        _only_get(request)
        _send(response, *answer())

    return handle


def _only_get(request: Request) -> None:
    if request.method not in ("GET", "HEAD"):
        raise ApiError(405, f"{request.method} {request.path}: Method Not Allowed", code="405",
                       headers={"Allow": "GET, HEAD"})


def _status_first(answer: tuple[dict[str, Any], int]) -> tuple[int, dict[str, Any]]:
    return answer[1], answer[0]


def _json(status: int, body: Any) -> tuple[int, bytes, bytes]:
    return status, JSON_TYPE, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _send(response: Response, status: int, media: bytes, body: bytes) -> None:
    response.start(status, ((b"content-type", media), WHO), len(body))
    response.write(body)
    response.end()
