"""The simulated engine's HTTP server: OpenAI routes, /metrics, health, faults, slots.

One :class:`SimEngine` per listening port. Routes: ``POST /v1/chat/completions``,
``POST /v1/completions``, ``GET /v1/models``, ``GET /health``, ``GET /version``,
``GET /metrics``; llama.cpp dialect also ``GET /slots``, ``POST /slots/{id}?action=``,
``GET /props`` and the native ``POST /completion``;
simulator-only ``GET|POST|DELETE /sim/faults`` and ``GET /sim/stats``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sim import generation
from sim.api_format import error_body
from sim.api_request import ApiError, GenSpec, Kind, parse_body, parse_request
from sim.core import EngineCore
from sim.faults import SLOW_METRICS_SECONDS, FaultError, Faults, FaultState, apply_patch
from sim.handoff import KvStore, SlotCache
from sim.llama_server import ModelFile, layout, model_file, models_json, props_json
from sim.metrics import Override, Recorder
from sim.profile import Profile
from sim.realtime import LiveEngine
from sim.slots import slot_action, slots_json

VERSIONS = {"vllm-v1": "0.10.1.1", "vllm-v0": "0.7.3", "sglang": "0.4.6.post5", "llamacpp": "b1-sim"}
PROM_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GARBAGE = b"<html><body>502 upstream garbage \x00\x01{\"choices\": [ truncated"


@dataclass
class EngineOptions:
    """What one simulated engine is."""

    profile: Profile
    name: str = "sim"
    dialect: str = "vllm-v1"
    served_model_name: str = "ds-32b"
    speed: float = 1.0
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    slot_save_path: Path | None = None
    parallel: int | None = None  # llama.cpp -np (number of slots)
    ctx_size: int | None = None  # llama.cpp -c (tokens shared by the slots); default: -np x the model's context
    model_file: ModelFile | None = None  # llama.cpp: the file both servers of a pair load; default: the profile's
    host: str = "127.0.0.1"
    port: int = 0


class SimEngine:
    """A simulated engine: model core, live clock, metrics, faults, and its HTTP app."""

    def __init__(self, opts: EngineOptions, store: KvStore | None = None) -> None:
        self.opts = opts
        self.name = opts.name
        self.profile = opts.profile
        self.dialect = opts.dialect
        self.host = opts.host
        self.port = opts.port
        self.engine_id = f"{opts.name}-{uuid.uuid4().hex[:8]}"
        self.store = store if store is not None else KvStore()
        self.live = LiveEngine(EngineCore(opts.profile, max_num_seqs=opts.parallel), speed=opts.speed)
        self.recorder = Recorder(self.live.core, opts.dialect)
        self.live.listeners.append(self.recorder.on_step)
        self.faults = FaultState(opts.faults, seed=opts.seed)
        n_slots = self.live.core.max_num_seqs if opts.dialect == "llamacpp" else 0
        self.layout = layout(opts.profile, self.live.core.max_num_seqs, opts.ctx_size)
        self.model_file = opts.model_file or model_file(opts.profile)
        self.slots: list[SlotCache] = [SlotCache() for _ in range(n_slots)]
        self.stats: dict[str, int] = {}
        self.pins: dict[str, int] = {}  # core request id -> pinned llama.cpp slot
        self.task_ids: dict[str, int] = {}
        self._next_task = 0
        self.created = int(time.time())
        handlers = {404: self._not_found, 405: self._not_found} if self.dialect == "llamacpp" else {}
        self.app = Starlette(routes=self._routes(), exception_handlers=handlers)

    def _routes(self) -> list[Route]:
        routes = [
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/sim/faults", self.faults_route, methods=["GET", "POST", "DELETE"]),
            Route("/sim/stats", self.sim_stats, methods=["GET"]),
        ]
        if self.dialect == "llamacpp":
            routes += [
                Route("/slots", self.slots_get, methods=["GET"]),
                Route("/slots/{id_slot}", self.slots_post, methods=["POST"]),
                Route("/props", self.props, methods=["GET"]),
                Route("/completion", self.native_completion, methods=["POST"]),
            ]
        return routes

    def choose_slot(self, spec: GenSpec) -> int | None:
        """llama.cpp: the slot a request runs in (None for other dialects, or when all are busy).

        A valid ``id_slot`` is used as asked (an out-of-range one is ignored, as llama-server
        does); otherwise an idle slot holding the same prompt, else the least recently used.
        """
        if self.dialect != "llamacpp":
            return None
        if spec.id_slot is not None and spec.id_slot < len(self.slots):
            return spec.id_slot
        busy = set(self.pins.values())
        idle = [i for i in range(len(self.slots)) if i not in busy]
        for i in idle:
            if self.slots[i].tokens and self.slots[i].fingerprint == spec.fingerprint:
                return i
        return min(idle, key=lambda i: self.slots[i].used_at) if idle else None

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        # llama-server answers unknown routes, and known ones with the wrong method, alike
        return self.error("File Not Found", 404, "not_found_error")

    def done(self, core_rid: str) -> None:
        """Forget a request that has ended (normally or not)."""
        self.pins.pop(core_rid, None)
        self.task_ids.pop(core_rid, None)

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

    @property
    def context_limit(self) -> int:
        """The longest context one request may have: a slot's for llama.cpp, else the model's."""
        return self.layout.slot_n_ctx if self.dialect == "llamacpp" else self.profile.max_model_len

    async def _generate(self, request: Request, kind: Kind, native: bool = False) -> Response:
        raw = await request.body()
        die, fail = self.faults.on_generation_request()
        if die:
            os._exit(1)
        f = self.faults.faults
        if f.added_latency > 0:
            await asyncio.sleep(f.added_latency)
        if fail:
            return self.error(f"simulated fault: error_rate {f.error_rate}", f.error_status)
        if f.garbage_body:
            media = "text/event-stream" if b'"stream":true' in raw.replace(b" ", b"") else "application/json"
            return Response(GARBAGE, status_code=200, media_type=media)
        try:
            body = parse_body(raw, llama=self.dialect == "llamacpp")
            spec = parse_request(kind, body, served_model=self.opts.served_model_name,
                                 max_model_len=self.context_limit,
                                 check_model=self.dialect.startswith("vllm"), llama=self.dialect == "llamacpp")
            if native and spec.stream:
                raise ApiError("the simulator's /completion does not stream; use /v1/completions", 501,
                               "not_supported_error")
        except ApiError as exc:
            return self.error(exc.message, exc.status, exc.kind, exc.param, exc.extra)
        plan = generation.plan_request(self, spec, request.headers.get("x-request-id"))
        handle = self.live.submit(plan.sim)
        self._next_task += 1
        self.task_ids[plan.core_rid] = plan.task = self._next_task
        if plan.slot is not None:
            self.pins[plan.core_rid] = plan.slot
        headers = generation.response_headers(plan)

        def disconnected() -> asyncio.Future[Any]:
            # the body is read, so the next message can only be the client leaving
            async def watch() -> None:
                while True:
                    message = await request.receive()
                    if message["type"] == "http.disconnect":
                        return
            return asyncio.ensure_future(watch())

        if spec.stream:
            early = None
            if self.dialect == "llamacpp":
                # llama-server sends its status and headers with the first token, not before
                early = await generation.first_event(self, plan, handle, disconnected)
                if early is None:
                    return Response(status_code=499)
            return StreamingResponse(generation.stream_answer(self, spec, plan, handle, disconnected, early),
                                     media_type="text/event-stream", headers=headers)
        answer = await generation.full_answer(self, spec, plan, handle, disconnected, native=native)
        if answer is None:
            return Response(status_code=499)
        return JSONResponse(answer, headers=headers)

    # -- plain routes -------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        """GET /v1/models."""
        name, now = self.opts.served_model_name, self.created
        if self.dialect == "llamacpp":
            return JSONResponse(models_json(self.model_file, name, self.layout.slot_n_ctx, now))
        owner = "sglang" if self.dialect == "sglang" else "vllm"
        card: dict[str, Any] = {
            "id": name, "object": "model", "created": now, "owned_by": owner, "root": self.profile.model_name,
            "parent": None, "max_model_len": self.profile.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": now, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}
        return JSONResponse({"object": "list", "data": [card]})

    async def props(self, request: Request) -> Response:
        """GET /props (llama.cpp): the model file, slots, per-slot context and build."""
        return JSONResponse(props_json(self.model_file, self.layout, self.opts.served_model_name))

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
        mode = self.faults.faults.metrics
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "slow":
            await asyncio.sleep(SLOW_METRICS_SECONDS)
        if mode == "garbage":
            return PlainTextResponse("<html>this is not prometheus {{{ \x00 metrics: maybe</html>\n")
        override = Override() if mode == "contradictory" else None
        text = self.recorder.render(self.opts.served_model_name, self.live.vnow(), override)
        return Response(text, media_type=PROM_CONTENT_TYPE)

    async def faults_route(self, request: Request) -> Response:
        """GET / POST / DELETE /sim/faults."""
        if request.method == "DELETE":
            self.faults.set(Faults())
        elif request.method == "POST":
            try:
                patch = json.loads(await request.body() or b"{}")
                self.faults.set(apply_patch(self.faults.faults, patch))
            except (ValueError, FaultError) as exc:
                return JSONResponse({"error": {"message": str(exc), "type": "BadRequestError", "param": None,
                                               "code": 400}}, status_code=400)
        return JSONResponse(self.faults.faults.to_json())

    async def sim_stats(self, request: Request) -> Response:
        """GET /sim/stats: the simulator's own view (virtual time, counters, handoffs)."""
        core = self.live.core
        c = core.counters
        return JSONResponse({
            "name": self.name, "engine_id": self.engine_id, "profile": self.profile.name, "dialect": self.dialect,
            "speed": self.live.speed, "virtual_time": self.live.vnow(), "running": core.num_running,
            "waiting": core.num_waiting, "swapped": core.num_swapped, "kv_usage": core.kv_usage,
            "kv_blocks": core.total_blocks, "free_blocks": core.free_blocks, "held": len(core.held),
            "prompt_tokens": c.prompt_tokens, "generation_tokens": c.generation_tokens,
            "preemptions": c.preemptions, "steps": c.steps, "finished": c.finished,
            "handoff_imports": c.handoff_imports, "cached_prompt_tokens": c.cached_prompt_tokens,
            "handoffs": dict(self.stats), "store_entries": len(self.store),
        })

    async def slots_get(self, request: Request) -> Response:
        """GET /slots (llama.cpp)."""
        return JSONResponse(slots_json(self))

    async def slots_post(self, request: Request) -> Response:
        """POST /slots/{id}?action=save|restore|erase (llama.cpp)."""
        return await slot_action(self, request)
