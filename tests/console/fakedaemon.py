"""A stand-in control API on a real Unix socket, for console tests and the console benchmark.

It serves a recorded or generated :class:`StateModel` with the daemon's routes (state,
SSE events, PATCH with validation and 403/422 refusals, save, reload) so the console can
be driven end to end before and beside the real daemon. Run it as a process with
``python -m tests.console.fakedaemon --socket PATH --cores 160 --engines 4 --rate 4``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from syshaxd.config import Decider
from syshaxd.schema import (
    ConductorStatsModel,
    ConfigChangeModel,
    DecisionModel,
    EngineStateModel,
    HostModel,
    NumaNodeModel,
    StateModel,
)

DATA = Path(__file__).parent / "data"


def recorded_state() -> StateModel:
    """The fixed state the layout tests render (2 GPU + 2 CPU engines, 160 cores, 4 nodes)."""
    return StateModel.model_validate_json((DATA / "state.json").read_text(encoding="utf-8"))


def generated_state(cores: int = 160, engines: int = 4, t: float = 0.0, seed: int = 0) -> StateModel:
    """A plausible busy box at time ``t``: engines split between GPU and CPU, 4 NUMA nodes."""
    rng = random.Random(seed * 1_000_003 + int(t * 10))
    wave = 0.5 + 0.5 * math.sin(t / 7.0)
    names = [(f"gpu{i}", "gpu") for i in range((engines + 1) // 2)]
    names += [(f"cpu{i}", "cpu") for i in range(engines // 2)]
    engine_models = []
    for index, (name, device) in enumerate(names):
        gpu = device == "gpu"
        engine_models.append(
            EngineStateModel(
                name=name,
                device=device,  # type: ignore[arg-type]
                url=f"http://127.0.0.1:{8001 + index}",
                dialect="vllm-v1" if gpu else "llamacpp",
                state="up",
                scraped_at=t,
                kv_cache_usage=min(0.99, 0.3 + 0.6 * wave + rng.uniform(-0.05, 0.05)),
                running=int(10 * wave + rng.randint(0, 6)) if gpu else rng.randint(2, 12),
                waiting=rng.randint(0, 4),
                swapped=None if gpu else 0,
                preemptions_total=float(int(t)) if gpu else None,
                prefill_tps=(9000 if gpu else 300) * (0.5 + wave) + rng.uniform(0, 300),
                decode_tps=(1500 if gpu else 90) * (0.5 + wave) + rng.uniform(0, 50),
                batch_limit=16 if gpu else 20,
                inflight=rng.randint(0, 12),
                scheduled=rng.randint(0, 2),
            )
        )
    per_node = max(cores // 4, 1)
    nodes = [
        NumaNodeModel(id=n, cpus=list(range(n * per_node, min((n + 1) * per_node, cores))),
                      mem_total=128 * 1024**3, mem_free=int((40 + 30 * wave) * 1024**3))  # fmt: skip
        for n in range(math.ceil(cores / per_node))
    ]
    bound = list(range(0, min(per_node, cores)))
    percent = [
        min(100.0, max(0.0, (85 if c in bound else 15) * (0.6 + 0.4 * wave) + rng.uniform(-10, 10)))
        for c in range(cores)
    ]
    host = HostModel(cpu_percent=percent, numa_nodes=nodes, mem_total=512 * 1024**3,
                     mem_used=int((300 + 80 * wave) * 1024**3), bound_cpus=bound)  # fmt: skip
    inflight = {e.name: e.inflight for e in engine_models}
    conductor = ConductorStatsModel(
        queue_depth=rng.randint(0, 8), queue_limit=100, inflight=inflight,
        requests_total=int(1000 + t * 12), requests_per_s=12.0 * (0.5 + wave),
        ttft_p50=0.21 + 0.1 * wave, ttft_p99=1.8 + wave,
        decisions={"gpu/whole": int(800 + t * 8), "cpu/whole": int(200 + t * 3), "cpu/pd_split": int(40 + t)},
        reasons={"gpu has room": int(800 + t * 8), "gpu batch full: cpu": int(200 + t * 3),
                 "long prompt: prefill on gpu": int(40 + t)},
        decision_accuracy=0.91, policy="adaptive", auto_pd_offload=False,
    )  # fmt: skip
    config = {
        "decider.policy": "adaptive", "decider.auto_pd_offload": False,
        "decider.gpu_max_batch_size": None, "decider.max_num_seqs": 16,
        "decider.cpu_max_batch_size": 20, "decider.gpu_cache_threshold": 90.0,
    }  # fmt: skip
    return StateModel(version="0.1.0", uptime=3600 + t, time=1_700_000_000 + t, engines=engine_models,
                      conductor=conductor, host=host, config=config)  # fmt: skip


def sample_decision(n: int, t: float, device: str = "gpu") -> DecisionModel:
    """A routing decision numbered ``n``."""
    return DecisionModel(
        time=t, request_id=f"req-{n:05d}", device=device, mode="whole",  # type: ignore[arg-type]
        engine=f"{device}0", reason="gpu has room" if device == "gpu" else "gpu batch full: cpu",
        policy="adaptive", prompt_tokens=200 + n, max_tokens=256, est_ttft=0.2, est_e2e=4.0,
    )  # fmt: skip


class FakeDaemon:
    """The control API's behaviour over one mutable state."""

    def __init__(self, state: StateModel, *, rate: float = 4.0, generate: bool = False) -> None:
        """Serve ``state``; with ``generate``, a fresh generated state every tick."""
        self.state = state
        self.rate = rate
        self.generate = generate
        self.forbidden: str | None = None  # set: every write answers 403 with this reason
        self.refuse: str | None = None  # set: every PATCH answers 422 with this reason
        self.patches: list[dict[str, Any]] = []  # the PATCH bodies applied
        self.saved = 0
        #: Every write request received, in order, applied or refused: (route, body). A
        #: request is recorded before it is answered, so a client that has its answer is in it.
        self.writes: list[tuple[str, Any]] = []
        self._queues: set[asyncio.Queue[tuple[str, str] | None]] = set()
        self._t = 0.0

    def publish(self, name: str, model: BaseModel) -> None:
        """Send an event to every open stream."""
        item = (name, model.model_dump_json())
        for queue in self._queues:
            queue.put_nowait(item)

    def add_decision(self, decision: DecisionModel) -> None:
        """Record a decision and send it."""
        self.state = self.state.model_copy(update={"recent_decisions": [*self.state.recent_decisions[-49:], decision]})
        self.publish("decision", decision)

    def close_streams(self) -> None:
        """End every open event stream (shutdown)."""
        for queue in self._queues:
            queue.put_nowait(None)

    async def ticker(self) -> None:
        """Publish the state ``rate`` times a second."""
        while True:
            await asyncio.sleep(1 / self.rate)
            self._t += 1 / self.rate
            if self.generate:
                current = self.state
                fresh = generated_state(len(current.host.cpu_percent), len(current.engines), self._t)
                self.state = fresh.model_copy(update={"config": current.config,
                                                      "recent_decisions": current.recent_decisions, "engines": [
                    e.model_copy(update={"draining": old.draining, "enabled": old.enabled})
                    for e, old in zip(fresh.engines, current.engines, strict=False)]})  # fmt: skip
            self.publish("state", self.state)

    def patch(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Validate and apply a PATCH body; (status, JSON answer)."""
        self.writes.append(("PATCH /v1/config", body))
        if self.forbidden:
            return 403, {"error": self.forbidden}
        if self.refuse:
            return 422, {"error": self.refuse, "key": next(iter(body), None) if isinstance(body, dict) else None}
        if not isinstance(body, dict) or not body:
            return 422, {"error": "expected a non-empty JSON object of dotted keys"}
        config = dict(self.state.config)
        engines = {e.name: e for e in self.state.engines}
        flags: dict[str, dict[str, bool]] = {}
        decider = {k.removeprefix("decider."): v for k, v in config.items() if k.startswith("decider.")}
        for key, value in body.items():
            parts = key.split(".")
            if parts[0] == "engines" and len(parts) == 3 and parts[2] in ("enabled", "draining"):
                if parts[1] not in engines:
                    return 422, {"error": f"no engine named {parts[1]!r}", "key": key}
                if not isinstance(value, bool):
                    return 422, {"error": f"{key} must be true or false, not {value!r}", "key": key}
                flags.setdefault(parts[1], {})[parts[2]] = value
            elif parts[0] == "decider" and len(parts) == 2 and parts[1] in Decider.model_fields:
                decider[parts[1]] = value
            else:
                return 422, {"error": f"{key!r} is not a runtime key", "key": key}
        try:
            Decider.model_validate(decider)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = "decider." + ".".join(str(p) for p in first["loc"])
            return 422, {"error": f"{key}: invalid value {first.get('input')!r}: {first['msg']}", "key": key}
        changed = {k: v for k, v in body.items() if k.startswith("decider.")}
        config.update(changed)
        new_engines = [e.model_copy(update=flags.get(e.name, {})) for e in self.state.engines]
        conductor = self.state.conductor.model_copy(update={
            "policy": config.get("decider.policy", ""), "auto_pd_offload": bool(config.get("decider.auto_pd_offload"))})  # fmt: skip
        self.state = self.state.model_copy(update={"config": config, "engines": new_engines, "conductor": conductor})
        self.patches.append(body)
        change = ConfigChangeModel(changed=changed, engines=flags)
        self.publish("config", change)
        return 200, change.model_dump(mode="json")

    def app(self) -> FastAPI:
        """The FastAPI app serving this daemon."""
        api = FastAPI()

        @api.get("/v1/state")
        async def state() -> Response:
            return Response(self.state.model_dump_json(), media_type="application/json")

        @api.get("/v1/events")
        async def events() -> StreamingResponse:
            queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
            self._queues.add(queue)

            async def stream() -> AsyncIterator[str]:
                try:
                    yield f"event: state\ndata: {self.state.model_dump_json()}\n\n"
                    while (item := await queue.get()) is not None:
                        yield f"event: {item[0]}\ndata: {item[1]}\n\n"
                finally:
                    self._queues.discard(queue)

            return StreamingResponse(stream(), media_type="text/event-stream")

        @api.patch("/v1/config")
        async def patch(request: Request) -> JSONResponse:
            try:
                body = json.loads(await request.body())
            except ValueError:
                return JSONResponse({"error": "the body is not JSON"}, status_code=400)
            status, answer = self.patch(body)
            return JSONResponse(answer, status_code=status)

        @api.post("/v1/config/save")
        async def save() -> JSONResponse:
            self.writes.append(("POST /v1/config/save", None))
            if self.forbidden:
                return JSONResponse({"error": self.forbidden}, status_code=403)
            self.saved += 1
            return JSONResponse(ConfigChangeModel(source="save").model_dump(mode="json"))

        @api.post("/v1/reload")
        async def reload() -> JSONResponse:
            self.writes.append(("POST /v1/reload", None))
            if self.forbidden:
                return JSONResponse({"error": self.forbidden}, status_code=403)
            return JSONResponse(ConfigChangeModel(source="reload").model_dump(mode="json"))

        return api


class _Server(uvicorn.Server):
    # uvicorn re-raises captured signals after serve(); the test process must keep its own.
    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


class FakeServer:
    """Runs a :class:`FakeDaemon` on a Unix socket inside the current event loop."""

    def __init__(self, daemon: FakeDaemon, path: Path) -> None:
        """Serve ``daemon`` at ``path`` once started."""
        self.daemon = daemon
        self.path = path
        self._tasks: list[asyncio.Task[None]] = []
        self._server: _Server | None = None

    async def start(self) -> None:
        """Bind the socket and serve until ``stop()``."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        config = uvicorn.Config(self.daemon.app(), log_level="error", lifespan="off", timeout_graceful_shutdown=1)
        self._server = _Server(config)
        self._tasks = [
            asyncio.create_task(self._server.serve(sockets=[sock])),
            asyncio.create_task(self.daemon.ticker()),
        ]
        while not self._server.started:
            if self._tasks[0].done():
                self._tasks[0].result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop serving, end the streams and remove the socket."""
        if self._server is not None:
            self.daemon.close_streams()
            self._server.should_exit = True
            await asyncio.gather(self._tasks[0], return_exceptions=True)
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


async def _serve(args: argparse.Namespace) -> None:
    daemon = FakeDaemon(generated_state(args.cores, args.engines), rate=args.rate, generate=True)
    server = FakeServer(daemon, Path(args.socket))
    await server.start()
    n = 0
    try:
        while True:
            await asyncio.sleep(1 / args.decisions if args.decisions > 0 else 3600)
            n += 1
            daemon.add_decision(sample_decision(n, daemon.state.time, "gpu" if n % 3 else "cpu"))
    finally:
        await server.stop()


def main() -> None:
    """Serve generated states until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--cores", type=int, default=160)
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--rate", type=float, default=4.0, help="state events per second")
    parser.add_argument("--decisions", type=float, default=8.0, help="decision events per second")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)


if __name__ == "__main__":
    main()
