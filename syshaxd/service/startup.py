"""The startup check, as sysHAX does it: is every engine there, and how fast does it decode?

Each engine is probed concurrently: ``GET /v1/models`` (the served model), ``GET /metrics``
(readable in its dialect), and, when asked, a short streamed test generation that measures
its decode speed. The GPU/CPU speed ratio is logged. Everything is bounded by a timeout
and nothing here is fatal: the daemon starts anyway and the monitor keeps watching.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from syshaxd.config import EngineSpec, ModelParams
from syshaxd.engines import MetricsParseError, get_dialect
from syshaxd.sse import aiter_events

log = logging.getLogger("syshaxd.startup")

#: Engines known to accept ``ignore_eos`` (so the test really generates test_tokens).
_IGNORE_EOS = ("vllm-v1", "vllm-v0", "llamacpp", "sglang")


@dataclass(frozen=True)
class EngineProbe:
    """What the startup check found out about one engine."""

    name: str
    device: str
    url: str
    models: tuple[str, ...] = ()
    models_error: str | None = None
    metrics_error: str | None = None
    generated_tokens: int | None = None
    ttft: float | None = None  # seconds to the first token of the test generation
    decode_tps: float | None = None  # tokens/s after the first token
    generation_error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every probe that ran succeeded."""
        return self.models_error is None and self.metrics_error is None and self.generation_error is None


@dataclass(frozen=True)
class StartupReport:
    """The startup check of every engine, and the GPU/CPU decode speed ratio."""

    engines: tuple[EngineProbe, ...]
    gpu_cpu_ratio: float | None  # fastest GPU decode / fastest CPU decode

    def probe(self, name: str) -> EngineProbe | None:
        """One engine's result by name."""
        return next((p for p in self.engines if p.name == name), None)


async def _probe_models(client: httpx.AsyncClient, probe: EngineProbe) -> EngineProbe:
    try:
        response = await client.get(probe.url + "/v1/models")
        response.raise_for_status()
        data = response.json().get("data", [])
        models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
        return replace(probe, models_error=f"/v1/models: {_describe(exc)}")
    return replace(probe, models=models)


async def _probe_metrics(client: httpx.AsyncClient, spec: EngineSpec, probe: EngineProbe) -> EngineProbe:
    dialect = get_dialect(spec.dialect)
    if dialect.metrics_path is None:
        return probe
    try:
        response = await client.get(probe.url + dialect.metrics_path)
        response.raise_for_status()
        dialect.parse(response.text)
    except (httpx.HTTPError, MetricsParseError) as exc:
        return replace(probe, metrics_error=f"{dialect.metrics_path}: {_describe(exc)}")
    return probe


def _chunk_tokens(payload: dict[str, Any]) -> int:
    choices = payload.get("choices") or []
    return sum(1 for c in choices if isinstance(c, dict) and (c.get("text") or (c.get("delta") or {}).get("content")))


async def _generate(
    client: httpx.AsyncClient, spec: EngineSpec, probe: EngineProbe, params: ModelParams, model: str
) -> EngineProbe:
    body: dict[str, Any] = {
        "model": model,
        "prompt": params.test_prompt,
        "max_tokens": params.test_tokens,
        "temperature": params.temperature,
        "stream": True,
        # Token counts from usage: an engine may put several tokens in one chunk.
        "stream_options": {"include_usage": True},
    }
    if spec.dialect in _IGNORE_EOS:
        body["ignore_eos"] = True
    started = time.monotonic()
    first = last = None
    tokens = 0
    usage: int | None = None
    try:
        async with client.stream("POST", probe.url + "/v1/completions", json=body) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")[:200]
                return replace(probe, generation_error=f"/v1/completions: HTTP {response.status_code}: {text}")
            async for event in aiter_events(response.aiter_bytes()):
                if event.done:
                    break
                payload = event.json()
                if not isinstance(payload, dict):
                    continue
                if "error" in payload:
                    return replace(probe, generation_error=f"/v1/completions: {payload['error']}")
                count = _chunk_tokens(payload)
                if count:
                    now = time.monotonic()
                    first = first if first is not None else now
                    last = now
                    tokens += count
                if isinstance(payload.get("usage"), dict):
                    usage = payload["usage"].get("completion_tokens", usage)
    except (httpx.HTTPError, ValueError) as exc:
        return replace(probe, generation_error=f"/v1/completions: {_describe(exc)}")
    if first is None or last is None:
        return replace(probe, generation_error="/v1/completions: the test generation produced no tokens")
    n = usage if isinstance(usage, int) and usage >= tokens else tokens
    decode = (n - 1) / (last - first) if n > 1 and last > first else None
    return replace(probe, generated_tokens=n, ttft=first - started, decode_tps=decode)


async def _check_one(
    client: httpx.AsyncClient, spec: EngineSpec, params: ModelParams, generate: bool, default_model: str
) -> EngineProbe:
    probe = EngineProbe(spec.name, spec.device, spec.url)
    probe = await _probe_models(client, probe)
    probe = await _probe_metrics(client, spec, probe)
    if generate and probe.models_error is None:
        probe = await _generate(client, spec, probe, params, probe.models[0] if probe.models else default_model)
    return probe


async def startup_check(
    engines: Sequence[EngineSpec],
    params: ModelParams,
    *,
    generate: bool = True,
    timeout: float = 60.0,
    default_model: str = "default",
    client: httpx.AsyncClient | None = None,
) -> StartupReport:
    """Probe every engine concurrently; never raises for an engine's failure.

    Args:
        engines: the resolved engines.
        params: ``models.params`` (test prompt, tokens and temperature).
        generate: run the test generation (``monitor.startup_check``).
        timeout: seconds the whole check may take; engines not done by then get an error.
        default_model: model name for an engine whose /v1/models lists none.
        client: an HTTP client to use (default: a new one, closed afterwards).
    """
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout))
    try:
        tasks = [asyncio.create_task(_check_one(http, s, params, generate, default_model)) for s in engines]
        done, pending = await asyncio.wait(tasks, timeout=timeout) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        probes = []
        for spec, task in zip(engines, tasks, strict=True):
            if task in done and task.exception() is None:
                probes.append(task.result())
            else:
                why = f"timed out after {timeout:g}s" if task in pending else _describe(task.exception())
                probes.append(EngineProbe(spec.name, spec.device, spec.url, generation_error=f"startup check {why}"))
        if pending:
            await asyncio.wait(pending)
    finally:
        if own:
            await http.aclose()
    report = StartupReport(tuple(probes), _ratio(probes))
    _log(report)
    return report


def _ratio(probes: Sequence[EngineProbe]) -> float | None:
    gpu = max((p.decode_tps for p in probes if p.device == "gpu" and p.decode_tps), default=None)
    cpu = max((p.decode_tps for p in probes if p.device == "cpu" and p.decode_tps), default=None)
    return gpu / cpu if gpu and cpu else None


def _log(report: StartupReport) -> None:
    for p in report.engines:
        if p.ok:
            speed = f", decode {p.decode_tps:.1f} tok/s" if p.decode_tps else ""
            log.info("engine %s (%s) ok: models %s%s", p.name, p.url, ", ".join(p.models) or "-", speed)
        else:
            problems = "; ".join(e for e in (p.models_error, p.metrics_error, p.generation_error) if e)
            log.warning("engine %s (%s) startup check: %s", p.name, p.url, problems)
    if report.gpu_cpu_ratio is not None:
        log.info("decode speed GPU/CPU ratio %.1f", report.gpu_cpu_ratio)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "failed"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
