"""One simulated engine without its HTTP front: what the routes, generation and slots share.

A :class:`SimEngine` holds the model core on its live clock, the /metrics recorder, the
faults, the handed-off KV store and, for the llama.cpp dialect, the slots and which
request runs in which. :mod:`sim.server` puts HTTP routes in front of it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sim.api_request import GenSpec
from sim.core import EngineCore
from sim.faults import Faults, FaultState
from sim.handoff import KvStore, SlotCache
from sim.llama_params import LlamaParams
from sim.llama_server import ModelFile, layout, model_file
from sim.metrics import Recorder
from sim.profile import Profile
from sim.realtime import LiveEngine


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
    """A simulated engine: model core, live clock, metrics, faults, KV store and slots."""

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
        self.live.set_paused(opts.faults.paused)
        n_slots = self.live.core.max_num_seqs if opts.dialect == "llamacpp" else 0
        self.layout = layout(opts.profile, self.live.core.max_num_seqs, opts.ctx_size)
        self.model_file = opts.model_file or model_file(opts.profile)
        self.slots: list[SlotCache] = [SlotCache() for _ in range(n_slots)]
        self.stats: dict[str, int] = {}
        self.pins: dict[str, int] = {}  # core request id -> pinned llama.cpp slot
        self.task_ids: dict[str, int] = {}
        self.params: dict[str, LlamaParams] = {}  # core request id -> what llama.cpp's /slots shows of it
        self._next_task = 0
        self.created = int(time.time())
        self.last_result = time.monotonic()

    def set_faults(self, faults: Faults) -> None:
        """Replace the fault settings (``paused`` stops or restarts the live clock)."""
        self.faults.set(faults)
        self.live.set_paused(faults.paused)

    @property
    def context_limit(self) -> int:
        """The longest context one request may have: a slot's for llama.cpp, else the model's."""
        return self.layout.slot_n_ctx if self.dialect == "llamacpp" else self.profile.max_model_len

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

    def started(self, core_rid: str, slot: int | None, params: LlamaParams | None = None) -> int:
        """Remember a request that has started (its slot pin, if any); returns its llama.cpp task id."""
        self._next_task += 1
        self.task_ids[core_rid] = self._next_task
        if slot is not None:
            self.pins[core_rid] = slot
        if params is not None:
            self.params[core_rid] = params
        return self._next_task

    def done(self, core_rid: str) -> None:
        """Forget a request that has ended (normally or not)."""
        self.pins.pop(core_rid, None)
        self.task_ids.pop(core_rid, None)
        self.params.pop(core_rid, None)

    def result_posted(self) -> None:
        """Note that the server answered something: a token of a stream, a whole answer, a scrape, a slot action.

        llama-server's HTTP threads wait on one shared result queue, and a non-streamed
        request looks at its client only after a full second without any result there
        (``sim/full_answer.py``).
        """
        self.last_result = time.monotonic()
