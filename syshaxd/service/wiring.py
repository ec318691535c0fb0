"""The daemon's parts, built once and handed to each other (construct, then pass in).

The engine clients are made here and given to the conductor (which routes to them), the
dispatcher (which talks to them) and the API (which lists their models); the monitor learns
from the conductor when an engine last answered; the vitals watch the conductor's traffic.
Nothing reaches through one part to another's: each gets what it uses.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from syshaxd.api import ApiServer, create_api_server, create_info_app, own_paths
from syshaxd.conductor import BookedFlight, Conductor, Dispatcher, Tracing
from syshaxd.config import Config, RuntimeConfig, engine_specs
from syshaxd.control import EventBus
from syshaxd.engines import EngineClient
from syshaxd.monitor import EngineAffinity, HostSampler, Monitor
from syshaxd.service.vitals import Vitals


@dataclass
class Parts:
    """Everything one run of the daemon serves with."""

    engines: dict[str, EngineClient]
    monitor: Monitor
    conductor: Conductor
    dispatcher: Dispatcher[BookedFlight]
    vitals: Vitals
    api: ApiServer
    own_paths: frozenset[str]  # syshaxd's own routes on the API port (workers forward them here)

    async def start(self) -> None:
        """Start polling, admitting and measuring (inside the running loop)."""
        await self.monitor.start()
        self.vitals.start()

    async def drain(self, grace: float) -> None:
        """Stop admitting; let what runs finish for up to ``grace`` s, then close the engine
        clients, which ends whatever still streams (each handler releases what it holds)."""
        try:
            await self.conductor.stop(grace)
        finally:
            for engine in self.engines.values():
                await engine.aclose()

    async def stop(self) -> None:
        """Stop the background work (after :meth:`drain`)."""
        await self.vitals.stop()
        await self.monitor.stop()
        self.conductor.books.records.close()
        await asyncio.to_thread(self.conductor.tracing.close)  # exports what is left


async def build_parts(config: Config, runtime: RuntimeConfig, bus: EventBus) -> Parts:
    """Build every part of the daemon from its config, runtime config and event bus."""
    specs = engine_specs(config)
    engines = {spec.name: EngineClient(spec) for spec in specs}
    affinity = EngineAffinity(spec.url for spec in specs if spec.device == "cpu")
    # The host sampler primes psutil's CPU counters: a blocking call, off the loop.
    host = await asyncio.to_thread(HostSampler, bound_cpus=affinity.cpus)
    monitor = Monitor(specs, config.monitor, host=host)
    conductor = Conductor(config=config, runtime=runtime, monitor=monitor, engines=engines, bus=bus,
                          tracing=Tracing(config.logging.otlp_endpoint))
    monitor.answered_at = conductor.answered_at
    monitor.busy = lambda: conductor.busy() or bus.subscriber_count > 0
    # Capacity a request's end does not make (a scrape, a config change) lets waiters in at once.
    monitor.add_listener(lambda _snapshot: conductor.kick())
    runtime.on_change(lambda _change: conductor.kick())
    runtime.check_service_with(conductor.fastest_tpot)
    dispatcher = Dispatcher(conductor, list(engines.values()), config.services.gpu.handoff)
    vitals = Vitals(conductor.registry, busy=conductor.busy, served=conductor.served)
    info = create_info_app(conductor, list(engines.values()), config.services.conductor.load_format)
    api = create_api_server(dispatcher, conductor, config, info)
    return Parts(engines=engines, monitor=monitor, conductor=conductor, dispatcher=dispatcher, vitals=vitals, api=api,
                 own_paths=own_paths(info))
