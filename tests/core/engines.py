"""Scripted engines on loopback ports: an OpenAI/vLLM front over :class:`sim.scripted.ScriptQueue`.

They run in one background thread with their own event loop (one uvicorn server per port)
and act only when the test tells them to (:meth:`ScriptedEngines.act`), so a daemon in front
of them sees exactly the history a script writes, whatever the machine's speed. A request
is named by its first user message (``r17``): the conductor's continuation of a split
request carries the same messages, so its part on the CPU is known as the same request.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from sim.scripted import Act, ScriptQueue

MODEL = "ds-32b"


@dataclass
class Part:
    """One request as one engine received it: what it asked for, what it was sent."""

    rid: str
    max_tokens: int
    stream: bool
    emitted: asyncio.Queue[tuple[int, bool]] = field(default_factory=asyncio.Queue)


class ScriptedEngine:
    """One engine: its queue of requests, its metrics, its HTTP routes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue = ScriptQueue()
        self.parts: dict[str, Part] = {}
        self.received: list[str] = []  # every request it was sent, by name, in order
        self.kv_usage = 0.0
        self.metrics_ok = True
        self.app = Starlette(routes=[
            Route("/health", self._health),
            Route("/v1/models", self._models),
            Route("/metrics", self._metrics),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])

    async def _health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "script"}]})

    async def _metrics(self, request: Request) -> Response:
        if not self.metrics_ok:
            return PlainTextResponse("scripted: down", status_code=500)
        lines = []
        for name, value in (("num_requests_running", 0.0), ("num_requests_waiting", 0.0),
                            ("kv_cache_usage_perc", self.kv_usage)):
            lines += [f"# TYPE vllm:{name} gauge", f'vllm:{name}{{engine="0",model_name="{MODEL}"}} {value}']
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        rid = str(body["messages"][0]["content"])
        part = Part(rid, int(body.get("max_tokens") or 16), bool(body.get("stream")))
        self.parts[rid] = part
        self.received.append(rid)
        self.queue.add(rid, part.max_tokens)
        if part.stream:
            return StreamingResponse(self._stream(part), media_type="text/event-stream")
        text, finish, tokens = "", "length", 0
        while True:
            n, done = await part.emitted.get()
            text, tokens = text + "t" * n, tokens + n
            if done:
                break
        self.parts.pop(rid, None)
        return JSONResponse({
            "id": f"chatcmpl-{rid}", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
        })

    async def _stream(self, part: Part) -> AsyncIterator[bytes]:
        tokens = 0
        try:
            while True:
                n, done = await part.emitted.get()
                tokens += n
                delta: dict[str, Any] = {"content": "t" * n}
                if tokens == n:
                    delta["role"] = "assistant"
                yield _event({"choices": [{"index": 0, "delta": delta, "finish_reason": "length" if done else None}]})
                if done:
                    yield _event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens,
                                                           "total_tokens": 10 + tokens}})
                    yield b"data: [DONE]\n\n"
                    return
        finally:
            self.parts.pop(part.rid, None)
            self.queue.drop(part.rid)

    def act(self, kind: Act) -> tuple[str, int, bool] | None:
        """Do ``kind`` to the oldest request it applies to: its name, the tokens written and
        whether its part here ended; None when no request was there to act on."""
        acted = self.queue.act(kind) if self.metrics_ok else None  # a hung engine answers nothing
        if acted is None:
            return None
        entry, tokens = acted
        self.parts[entry.rid].emitted.put_nowait((tokens, entry.finished))
        return entry.rid, tokens, entry.finished


def _event(data: dict[str, Any]) -> bytes:
    data = {"id": "chatcmpl-script", "object": "chat.completion.chunk", "created": 0, "model": MODEL, **data}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class ScriptedEngines:
    """Several scripted engines, each on its own loopback port, served from one thread."""

    def __init__(self, names: list[str]) -> None:
        self.engines = {name: ScriptedEngine(name) for name in names}
        self.ports: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._servers: list[uvicorn.Server] = []
        self._serving: list[Future[None]] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-engines", daemon=True)

    def start(self) -> None:
        """Listen on free ports and serve until :meth:`stop`."""
        self._thread.start()
        for name, engine in self.engines.items():
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            self.ports[name] = sock.getsockname()[1]
            config = uvicorn.Config(engine.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
            server = uvicorn.Server(config)
            self._servers.append(server)
            self._serving.append(asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), self._loop))
        for server in self._servers:
            self.call(lambda s=server: s.started, until=True)

    def call(self, fn: Callable[[], Any], until: bool = False, timeout: float = 30.0) -> Any:
        """Run ``fn`` on the engines' loop and return its result (``until``: poll until it is truthy)."""
        async def run() -> Any:
            while True:
                value = fn()
                if value or not until:
                    return value
                await asyncio.sleep(0.01)

        future: Future[Any] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(timeout)

    def act(self, engine: str, kind: Act) -> tuple[str, int, bool] | None:
        """Engine ``engine`` does ``kind`` to its oldest request it applies to (see :meth:`ScriptedEngine.act`)."""
        return self.call(lambda: self.engines[engine].act(kind))  # type: ignore[no-any-return]

    def world(self, engine: str, *, kv_usage: float | None = None, metrics_ok: bool | None = None) -> None:
        """Change what an engine's scrapes show."""
        def change() -> None:
            target = self.engines[engine]
            if kv_usage is not None:
                target.kv_usage = kv_usage
            if metrics_ok is not None:
                target.metrics_ok = metrics_ok

        self.call(change)

    def holding(self) -> dict[str, set[str]]:
        """The requests each engine has and has not ended, by engine."""
        return self.call(lambda: {name: set(e.parts) for name, e in self.engines.items()})  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Stop every server, then the thread."""
        for server in self._servers:
            server.should_exit = True
        try:
            for serving in self._serving:
                serving.result(15)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
