"""The daemon's record of its traffic: a bounded ring of finished requests, maybe a file too.

Every request that ends (any way) leaves one :class:`Record`: when it arrived, its size, the
decision with the engines as the policy saw them and the limits it applied, and what
happened. Never prompt text. Requests marked as ``syshax calibrate``'s probes are served but
not kept: they measured an engine, they are not traffic (the conductor counts them,
``syshax_probe_requests_total``). Keeping one costs a small object per request: the snapshot the
policy saw is kept by reference (it is immutable) and turned into
:class:`~syshaxd.schema.RequestRecordModel` only when someone reads it (``GET /v1/requests``,
the console's requests view, ``syshax advise``). With ``logging.requests_file`` each record is
also appended as one JSON line to a rotating file.
"""

from __future__ import annotations

import logging
import logging.handlers
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from syshaxd.routing import Limits
from syshaxd.schema import DecisionModel, EngineInputModel, RequestRecordModel
from syshaxd.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Record:
    """One finished request, as cheap to keep as possible."""

    request_id: str
    arrival: float  # time.time()
    kind: str
    stream: bool
    prompt_tokens: int
    max_tokens: int
    output_tokens: int | None
    outcome: str
    decision: DecisionModel | None
    seen: Snapshot | None  # what the policy saw
    limits: Limits | None
    queued: float | None
    ttft: float | None
    e2e: float
    service_class: str = ""
    ttft_target: float | None = None
    tpot_target: float | None = None
    gpu_seconds: float = 0.0
    cpu_core_seconds: float = 0.0
    output_source: str | None = None  # usage, timings, counted (syshaxd.conductor.tally)
    prompt_source: str = "estimate"  # usage, timings, estimate
    decode: float | None = None  # seconds from the first token written to the client to the last
    api_key_name: str | None = None  # the key it came with, by name
    refused: str | None = None  # the core's reason when it refused the request (or took it back)
    choices: int = 1  # the request's n: output_tokens is the sum over them
    longest: int | None = None  # several choices: the tokens of the longest (syshaxd.conductor.tally)
    probe: bool = False  # calibrate's probe: served, never kept

    def met(self, tpot: float | None) -> bool | None:
        """Whether it was answered whole within its own targets (None: not answered)."""
        if self.outcome != "ok":
            return None
        if self.ttft is None:
            return False
        if self.ttft_target is not None and self.ttft > self.ttft_target:
            return False
        return not (self.tpot_target is not None and tpot is not None and tpot > self.tpot_target)

    def tpot(self) -> float | None:
        """Seconds per output token after the first, from the times the first and last token
        were written to the client; None when those were not seen (a whole answer). Several
        choices decode side by side: the tokens are the longest choice's."""
        tokens = self.output_tokens if self.choices <= 1 else self.longest
        if self.decode is not None and tokens is not None and tokens > 1:
            return self.decode / (tokens - 1)
        return None

    def model(self) -> RequestRecordModel:
        """The record on the wire."""
        tpot = self.tpot()
        inputs = [EngineInputModel(name=v.name, device=v.device, state=v.state.value, usable=v.usable,
                                   running=v.running, waiting=v.waiting, inflight=v.inflight,
                                   kv_cache_usage=v.metrics.kv_cache_usage, tpot_recent=v.metrics.tpot_recent,
                                   ttft_recent=v.metrics.ttft_recent, prefill_speed=v.metrics.prefill_speed)
                  for v in (self.seen.engines if self.seen is not None else ())]
        return RequestRecordModel(
            request_id=self.request_id, arrival=self.arrival, kind=self.kind, stream=self.stream,
            prompt_tokens=self.prompt_tokens, max_tokens=self.max_tokens, output_tokens=self.output_tokens,
            outcome=self.outcome, decision=self.decision, inputs=inputs,
            limits=asdict(self.limits) if self.limits is not None else {}, queued=self.queued, ttft=self.ttft,
            tpot=tpot, e2e=self.e2e, service_class=self.service_class or None, ttft_target=self.ttft_target,
            tpot_target=self.tpot_target, met=self.met(tpot), gpu_seconds=round(self.gpu_seconds, 6),
            cpu_core_seconds=round(self.cpu_core_seconds, 6), output_tokens_source=self.output_source,
            prompt_tokens_source=self.prompt_source, api_key_name=self.api_key_name,
            refused=self.refused, choices=self.choices)


class RequestLog:
    """The last ``kept`` finished requests, oldest first; optionally every one to a file."""

    def __init__(self, kept: int = 2000, file: Path | None = None, max_bytes: int = 64 * 1024**2,
                 backups: int = 5) -> None:
        self.records: deque[Record] = deque(maxlen=kept)
        self.total = 0
        self._file: logging.Logger | None = None
        if file is not None:
            handler = logging.handlers.RotatingFileHandler(file, maxBytes=max_bytes, backupCount=backups,
                                                           encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._file = logging.getLogger(f"syshaxd.requests.{id(self)}")
            self._file.propagate = False
            self._file.setLevel(logging.INFO)
            self._file.addHandler(handler)

    def add(self, record: Record) -> bool:
        """Keep a finished request (and write it to the file, when there is one); False for a
        probe, which is not kept."""
        if record.probe:
            return False
        self.total += 1
        if self.records.maxlen:
            self.records.append(record)
        if self._file is not None:
            self._file.info(record.model().model_dump_json(exclude_none=True))
        return True

    def models(self, limit: int | None = None) -> list[RequestRecordModel]:
        """The last ``limit`` records (all kept when None), oldest first."""
        kept = list(self.records)
        if limit is not None:
            kept = kept[-limit:] if limit > 0 else []
        return [record.model() for record in kept]

    def close(self) -> None:
        """Close the file, if any."""
        if self._file is not None:
            for handler in list(self._file.handlers):
                handler.close()
                self._file.removeHandler(handler)
