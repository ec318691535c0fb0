"""The simulated engine's HTTP routes: OpenAI routes, /metrics, health, faults, slots.

One app per listening port, in front of one :class:`~sim.engine.SimEngine`. Routes:
``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``,
``GET /v1/models``, ``GET /health``, ``GET /metrics``, the utility routes of
:mod:`sim.utility_routes` (tokenize, detokenize; vLLM also embeddings, score, rerank);
vLLM and SGLang also ``GET /version``; llama.cpp dialect also ``POST /responses``,
``GET /slots``, ``POST /slots/{id}?action=``, ``GET /props`` and the native
``POST /completion``; simulator-only ``GET|POST|DELETE /sim/faults`` and
``GET /sim/stats``. An unknown route is FastAPI's 404 ``{"detail": "Not Found"}`` (vLLM,
SGLang), llama-server's ``File Not Found`` error (llama.cpp).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sim import generation
from sim.api_format import error_body
from sim.api_request import ApiError, GenSpec, Kind, parse_body, parse_request
from sim.engine import SimEngine
from sim.faults import SLOW_METRICS_SECONDS, FaultError, Faults, apply_patch
from sim.full_answer import full_answer
from sim.generation import Plan
from sim.llama_server import models_json, props_json
from sim.metrics import Override
from sim.realtime import Handle, TokenEvent
from sim.responses_answer import full_response, response_events, stream_response
from sim.responses_request import ResponsesParams, llama_request, vllm_request
from sim.slots import slot_action, slots_json
from sim.stream_answer import stream_answer
from sim.token_stream import first_event
from sim.utility_routes import UtilityRoutes

#: What `GET /version` says (llama-server has no such route).
VERSIONS = {"vllm-v1": "0.10.1.1", "vllm-v0": "0.7.3", "sglang": "0.4.6.post5"}
PROM_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GARBAGE = b"<html><body>502 upstream garbage \x00\x01{\"choices\": [ truncated"


def http_app(engine: SimEngine) -> Starlette:
    """The Starlette app that serves one engine (its routes depend on the dialect)."""
    return _Routes(engine).app


class _Routes:
    """The route handlers of one engine, in its dialect."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        self.utility = UtilityRoutes(engine, self.api_error)
        not_found = self._not_found if self.dialect == "llamacpp" else self._fastapi_error
        self.app = Starlette(routes=self._routes(), exception_handlers={404: not_found, 405: not_found})

    def _routes(self) -> list[Route]:
        routes = [
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/sim/faults", self.faults_route, methods=["GET", "POST", "DELETE"]),
            Route("/sim/stats", self.sim_stats, methods=["GET"]),
        ]
        if self.dialect != "sglang":
            routes += [Route("/v1/responses", self.responses, methods=["POST"]), *self.utility.routes()]
        if self.dialect != "llamacpp":
            routes.append(Route("/version", self.version, methods=["GET"]))
        else:
            routes += [
                Route("/responses", self.responses, methods=["POST"]),
                Route("/slots", self.slots_get, methods=["GET"]),
                Route("/slots/{id_slot}", self.slots_post, methods=["POST"]),
                Route("/props", self.props, methods=["GET"]),
                Route("/completion", self.native_completion, methods=["POST"]),
            ]
        return routes

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        # llama-server answers unknown routes, and known ones with the wrong method, alike
        return self.error("File Not Found", 404, "not_found_error")

    async def _fastapi_error(self, request: Request, exc: Exception) -> Response:
        # vLLM and SGLang are FastAPI apps: an unknown route or method is {"detail": ...}
        assert isinstance(exc, HTTPException)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    def api_error(self, exc: ApiError) -> JSONResponse:
        """A refused request's error response."""
        return self.error(exc.message, exc.status, exc.kind, exc.param, exc.extra)

    def error(self, message: str, status: int = 400, kind: str | None = None, param: str | None = None,
              extra: dict[str, Any] | None = None) -> JSONResponse:
        """An error response in this engine's dialect."""
        body = error_body(self.dialect, message, status, kind, param)
        if extra and self.dialect == "llamacpp":
            body["error"].update(extra)  # e.g. n_prompt_tokens and n_ctx of exceed_context_size_error
        return JSONResponse(body, status_code=status)

    # -- generation ---------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        return await self._generate(request, "chat")

    async def completions(self, request: Request) -> Response:
        """POST /v1/completions."""
        return await self._generate(request, "completion")

    async def native_completion(self, request: Request) -> Response:
        """POST /completion (llama.cpp's own route: ``prompt``, ``n_predict``; answers ``content``)."""
        return await self._generate(request, "completion", native=True)

    async def _faults_first(self, request: Request) -> tuple[bytes, Response | None]:
        """A generation request's body, and the answer a fault gives instead (None: no fault fired)."""
        raw = await request.body()
        die, fail = self.engine.faults.on_generation_request()
        if die:
            os._exit(1)
        f = self.engine.faults.faults
        if f.added_latency > 0:
            await asyncio.sleep(f.added_latency)
        if fail:
            return raw, self.error(f"simulated fault: error_rate {f.error_rate}", f.error_status)
        if f.garbage_body:
            media = "text/event-stream" if b'"stream":true' in raw.replace(b" ", b"") else "application/json"
            return raw, Response(GARBAGE, status_code=200, media_type=media)
        return raw, None

    def _start(self, request: Request, spec: GenSpec) -> list[tuple[Plan, Handle]]:
        """Plan a parsed request and put it on the engine core: a sequence per choice, their
        events on one queue."""
        engine = self.engine
        first = generation.plan_request(engine, spec, request.headers.get("x-request-id"))
        out: list[tuple[Plan, Handle]] = []
        for i in range(spec.n):
            # a later choice's llama.cpp slot is chosen once the earlier ones hold theirs
            plan = first if i == 0 else generation.plan_choice(engine, spec, first, i)
            handle = engine.live.submit(plan.sim, out[0][1].events if out else None, i)
            plan.task = engine.started(plan.core_rid, plan.slot, spec.llama_params)
            out.append((plan, handle))
        return out

    def _check_choices(self, spec: GenSpec, native: bool) -> GenSpec:
        """``spec`` if its ``n`` can be served: llama-server runs each choice in a slot of its own."""
        if self.dialect != "llamacpp":
            return spec
        if native:
            return replace(spec, n=1)  # the native route answers one completion
        slots = len(self.engine.slots)
        if not 1 <= spec.n <= slots:
            raise ApiError(f"Field 'n': Value must be between 1 <= value <= {slots}, but got {spec.n}")
        return spec

    @staticmethod
    def _watcher(request: Request) -> Callable[[], asyncio.Future[Any]]:
        def disconnected() -> asyncio.Future[Any]:
            # the body is read, so the next message can only be the client leaving
            async def watch() -> None:
                while True:
                    message = await request.receive()
                    if message["type"] == "http.disconnect":
                        return
            return asyncio.ensure_future(watch())
        return disconnected

    async def _stream(self, plan: Plan, handle: Handle, disconnected: Callable[[], asyncio.Future[Any]],
                      headers: dict[str, str], body: Callable[[TokenEvent | None], AsyncIterator[bytes]]) -> Response:
        """A streamed answer, ``body`` given the first event where it was awaited already (499: the client left)."""
        early = None
        if self.dialect == "llamacpp":
            # llama-server sends its status and headers with the first token, not before
            early = await first_event(self.engine, plan, handle, disconnected)
            if early is None:
                return Response(status_code=499)
        return StreamingResponse(body(early), media_type="text/event-stream", headers=headers)

    async def _generate(self, request: Request, kind: Kind, native: bool = False) -> Response:
        engine = self.engine
        raw, faulted = await self._faults_first(request)
        if faulted is not None:
            return faulted
        try:
            body = parse_body(raw, llama=self.dialect == "llamacpp")
            spec = parse_request(kind, body, served_model=engine.opts.served_model_name,
                                 max_model_len=engine.context_limit,
                                 check_model=self.dialect.startswith("vllm"), llama=self.dialect == "llamacpp")
            if native and spec.stream:
                raise ApiError("the simulator's /completion does not stream; use /v1/completions", 501,
                               "not_supported_error")
            spec = self._check_choices(spec, native)
        except ApiError as exc:
            return self.api_error(exc)
        choices = self._start(request, spec)
        plan, handle = choices[0]
        headers = generation.response_headers(plan)
        disconnected = self._watcher(request)
        if spec.stream:
            return await self._stream(plan, handle, disconnected, headers,
                                      lambda early: stream_answer(engine, spec, choices, disconnected, early))
        answer = await full_answer(engine, spec, choices, disconnected, native=native)
        if answer is None:
            return Response(status_code=499)
        return JSONResponse(answer, headers=headers)

    async def responses(self, request: Request) -> Response:
        """POST /v1/responses (llama.cpp also /responses): a chat request answered in the Responses API's shape."""
        engine = self.engine
        raw, faulted = await self._faults_first(request)
        if faulted is not None:
            return faulted
        params: ResponsesParams | None = None
        try:
            body = parse_body(raw, llama=self.dialect == "llamacpp")
            if self.dialect == "llamacpp":
                spec = llama_request(body, served_model=engine.opts.served_model_name, n_ctx=engine.context_limit)
            else:
                spec, params = vllm_request(body, served_model=engine.opts.served_model_name,
                                            max_model_len=engine.context_limit)
        except ApiError as exc:
            return self.api_error(exc)
        created = int(time.time())
        plan, handle = self._start(request, spec)[0]
        plan.response_id = params.response_id if params is not None else f"resp_{uuid.uuid4().hex}"
        headers = generation.response_headers(plan)
        disconnected = self._watcher(request)
        if spec.stream:
            events = response_events(spec, plan, params, created)
            return await self._stream(plan, handle, disconnected, headers,
                                      lambda early: stream_response(engine, spec, plan, handle, disconnected, events,
                                                                    early))
        answer = await full_response(engine, spec, plan, handle, disconnected, params, created)
        if answer is None:
            return Response(status_code=499)
        return JSONResponse(answer, headers=headers)

    # -- plain routes -------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        """GET /v1/models."""
        engine = self.engine
        name, now = engine.opts.served_model_name, engine.created
        if self.dialect == "llamacpp":
            return JSONResponse(models_json(engine.model_file, name, engine.layout.slot_n_ctx, now))
        owner = "sglang" if self.dialect == "sglang" else "vllm"
        card: dict[str, Any] = {
            "id": name, "object": "model", "created": now, "owned_by": owner, "root": engine.profile.model_name,
            "parent": None, "max_model_len": engine.profile.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": now, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}
        return JSONResponse({"object": "list", "data": [card]})

    async def props(self, request: Request) -> Response:
        """GET /props (llama.cpp): the model file, slots, per-slot context and build."""
        e = self.engine
        return JSONResponse(props_json(e.model_file, e.layout, e.opts.served_model_name))

    async def health(self, request: Request) -> Response:
        """GET /health: 200 (llama-server answers a small JSON object)."""
        if self.dialect == "llamacpp":
            return JSONResponse({"status": "ok"})
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        """GET /version."""
        return JSONResponse({"version": VERSIONS.get(self.dialect, "sim")})

    async def metrics(self, request: Request) -> Response:
        """GET /metrics in this engine's dialect (subject to the metrics fault)."""
        mode = self.engine.faults.faults.metrics
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "slow":
            await asyncio.sleep(SLOW_METRICS_SECONDS)
        if mode == "garbage":
            return PlainTextResponse("<html>this is not prometheus {{{ \x00 metrics: maybe</html>\n")
        override = Override() if mode == "contradictory" else None
        e = self.engine
        text = e.recorder.render(e.opts.served_model_name, e.live.vnow(), override)
        e.result_posted()
        return Response(text, media_type=PROM_CONTENT_TYPE)

    async def faults_route(self, request: Request) -> Response:
        """GET / POST / DELETE /sim/faults."""
        faults = self.engine.faults
        if request.method == "DELETE":
            self.engine.set_faults(Faults())
        elif request.method == "POST":
            try:
                patch = json.loads(await request.body() or b"{}")
                self.engine.set_faults(apply_patch(faults.faults, patch))
            except (ValueError, FaultError) as exc:
                return JSONResponse({"error": {"message": str(exc), "type": "BadRequestError", "param": None,
                                               "code": 400}}, status_code=400)
        return JSONResponse(faults.faults.to_json())

    async def sim_stats(self, request: Request) -> Response:
        """GET /sim/stats: the simulator's own view (virtual time, counters, handoffs)."""
        e = self.engine
        core = e.live.core
        c = core.counters
        return JSONResponse({
            "name": e.name, "engine_id": e.engine_id, "profile": e.profile.name, "dialect": e.dialect,
            "speed": e.live.speed, "virtual_time": e.live.vnow(), "running": core.num_running,
            "waiting": core.num_waiting, "swapped": core.num_swapped, "kv_usage": core.kv_usage,
            "kv_blocks": core.total_blocks, "free_blocks": core.free_blocks, "held": len(core.held),
            "prompt_tokens": c.prompt_tokens, "generation_tokens": c.generation_tokens,
            "preemptions": c.preemptions, "steps": c.steps, "finished": c.finished,
            "handoff_imports": c.handoff_imports, "cached_prompt_tokens": c.cached_prompt_tokens,
            "handoffs": dict(e.stats), "store_entries": len(e.store),
        })

    async def slots_get(self, request: Request) -> Response:
        """GET /slots (llama.cpp)."""
        self.engine.result_posted()
        return JSONResponse(slots_json(self.engine))

    async def slots_post(self, request: Request) -> Response:
        """POST /slots/{id}?action=save|restore|erase (llama.cpp)."""
        response = await slot_action(self.engine, request)
        self.engine.result_posted()
        return response
