"""The box as one worker of a cluster router: its load, computed over both engines.

A cluster router (vllm-router, the SGLang model gateway, the Gateway API Inference
Extension's endpoint picker) sees a syshax box as one worker. What it reads must be true of
the whole box, not of one engine:

- *waiting*: requests not yet running anywhere -- the conductor's admission queue plus what
  the engines report waiting inside themselves;
- *running*: everything running on either engine, CPU decodes included (per engine, the
  engine's own count or the conductor's, whichever is higher: a scrape can be a second old);
- *KV usage*: the GPU engine's (the fullest usable GPU engine's). New work goes to the GPU
  first and the GPU's KV cache is what runs out first and makes requests queue; the CPU
  engine's cache lives in host memory, an order of magnitude larger, and a box whose GPU is
  full is a box a router should avoid even if its CPU could still take a slow request. When
  no GPU engine is usable, the CPU engine's usage stands for the box.

The same numbers answer ``/get_load`` (vllm-router's and SGLang's shapes), ``/load`` (vLLM's)
and the ``vllm:`` gauges beside the ``syshax_*`` series on ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Gauge

from syshaxd.snapshot import Snapshot

#: The shapes ``GET /get_load`` can answer in (``services.conductor.load_format``).
LoadFormat = Literal["vllm-router", "sglang"]


@dataclass(frozen=True)
class BoxLoad:
    """What the box holds right now."""

    queued: int  # in the conductor's admission queue
    waiting: int  # queued + waiting inside the engines
    running: int  # running on any engine
    kv_usage: float | None  # 0..1, see the module's note; None when no engine reports it
    tokens: int  # prompt tokens still to prefill + output tokens running requests may still write

    @property
    def load(self) -> int:
        """Requests the box holds: waiting and running."""
        return self.waiting + self.running


def box_load(snap: Snapshot, queued: int) -> BoxLoad:
    """The box's load from the conductor's live snapshot and its queue length."""
    engines = snap.engines
    gpu = [e.metrics.kv_cache_usage for e in snap.usable("gpu") if e.metrics.kv_cache_usage is not None]
    cpu = [e.metrics.kv_cache_usage for e in snap.usable("cpu") if e.metrics.kv_cache_usage is not None]
    usage = max(gpu) if gpu else max(cpu) if cpu else None
    return BoxLoad(
        queued=queued,
        waiting=queued + sum(e.waiting for e in engines),
        running=sum(e.running for e in engines),
        kv_usage=usage,
        tokens=sum(e.inflight_decode_tokens + e.scheduled_prompt_tokens for e in engines),
    )


def get_load_body(load: BoxLoad, fmt: LoadFormat) -> Any:
    """``GET /get_load``: ``{"load": N}`` for vllm-router; one entry per data-parallel rank
    (the box is one) for the SGLang model gateway."""
    if fmt == "sglang":
        return [{"dp_rank": 0, "num_reqs": load.load, "num_waiting_reqs": load.waiting, "num_tokens": load.tokens}]
    return {"load": load.load}


class VllmGauges:
    """The ``vllm:`` series an endpoint picker scrapes, with vLLM's names, types and labels."""

    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        labels = ["engine", "model_name"]  # vLLM v1: engine index "0", the served model
        self.model_name = model_name
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             labels, registry=registry)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             labels, registry=registry)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                        labels, registry=registry)

    def update(self, load: BoxLoad) -> None:
        """Set every gauge to the box's load (called when ``/metrics`` is read)."""
        engine, model = "0", self.model_name
        self.waiting.labels(engine, model).set(load.waiting)
        self.running.labels(engine, model).set(load.running)
        if load.kv_usage is not None:
            self.kv.labels(engine, model).set(load.kv_usage)
        else:  # not known (no engine reports it): no sample rather than a false 0
            self.kv.clear()
