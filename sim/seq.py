"""What the engine core works on: requests, sequences, step results and counters."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class State(str, enum.Enum):
    """Where a sequence is."""

    WAITING = "waiting"
    LOADING = "loading"  # handed-off KV arriving
    RUNNING = "running"
    SWAPPED = "swapped"
    HELD = "held"  # finished, blocks kept for a remote decode
    FINISHED = "finished"


@dataclass
class SimRequest:
    """What the core needs to know about one request.

    ``context_tokens`` is everything before the first new token (prompt, plus text already
    generated elsewhere). ``kv_ready_tokens`` of it arrive as handed-off KV after
    ``kv_delay`` seconds instead of being prefilled. The request stops after
    ``max_new_tokens`` and then reports ``finish_reason``. ``prefix`` names the prompt's
    leading blocks of ``prefix_block`` tokens by hash id, as a Mooncake trace does: two
    requests share their KV exactly as far as their leading ids agree
    (:mod:`sim.prefix_cache`); empty, the request shares nothing.
    """

    rid: str
    context_tokens: int
    max_new_tokens: int
    finish_reason: str = "length"
    kv_ready_tokens: int = 0
    kv_delay: float = 0.0
    hold_kv: bool = False  # keep the blocks after finishing until release() (kv-transfer prefill)
    prefix: tuple[int, ...] = ()
    prefix_block: int = 512


@dataclass(eq=False)
class Seq:
    """A request inside the engine."""

    req: SimRequest
    arrival: float
    num_tokens: int  # context + generated: every token whose KV will exist
    num_computed: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    swap_blocks: int = 0
    state: State = State.WAITING
    ready_at: float = 0.0
    first_scheduled: float | None = None
    first_token: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    imported: bool = False
    prefill_done: int = 0  # prompt tokens this engine computed (not imported)
    # automatic prefix caching (sim.prefix_cache): the prefix's blocks as cache keys and the
    # engine-block-aligned token each ends at, the cached blocks this sequence references,
    # how many of its ``blocks`` they are, and its prefix blocks already looked up or cached
    chain: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    held: list[int] = field(default_factory=list)
    shared: int = 0
    prefix_done: int = 0

    def __post_init__(self) -> None:
        self.rid = self.req.rid  # read in every step: a plain attribute is faster than a property


@dataclass
class StepResult:
    """What one step (or one fast-forwarded run of decode steps) did."""

    start: float
    end: float
    tokens: list[tuple[Seq, int]] = field(default_factory=list)  # new output tokens per sequence
    finished: list[Seq] = field(default_factory=list)
    preempted: list[Seq] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    steps: int = 1
    batch: int = 0


@dataclass
class Counters:
    """Cumulative totals, as an engine's /metrics counters report them."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    steps: int = 0
    busy_time: float = 0.0
    prefill_time: float = 0.0  # share of busy time spent on prompt tokens
    finished: dict[str, int] = field(default_factory=dict)
    max_seq_tokens: int = 0
    handoff_imports: int = 0
    cached_prompt_tokens: int = 0  # context tokens whose KV arrived instead of being prefilled
    prefix_cache_hit_tokens: int = 0  # context tokens of admissions found in the prefix cache (not prefilled)

    def add_step(self, result: StepResult, duration: float) -> None:
        """Count one step (or fast-forwarded run of steps) that took ``duration`` seconds."""
        self.steps += result.steps
        self.busy_time += duration
        self.prompt_tokens += result.prefill_tokens
        self.generation_tokens += result.decode_tokens
        total = result.prefill_tokens + result.decode_tokens
        if total:
            self.prefill_time += duration * result.prefill_tokens / total
        for seq, _ in result.tokens:
            self.max_seq_tokens = max(self.max_seq_tokens, seq.num_tokens)
