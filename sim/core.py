"""The engine model, independent of any clock: continuous batching over a paged KV cache.

It follows vLLM's v1 scheduler closely enough for capacity questions: each step has a
token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``); running
requests are served first (one token each when decoding, a chunk when still
prefilling), then waiting requests are admitted in arrival order while blocks and
budget last. A request whose prompt blocks are cached (automatic prefix caching, when a
trace names its blocks: :mod:`sim.prefix_cache`) starts after them. When a running
request needs a block and none is free, the most recently
admitted request is preempted (its blocks freed for recomputation, or moved to swap
space in ``swap`` mode) and counted. Time is virtual: ``step()`` advances ``now`` by the
roofline step time, and ``advance()`` runs a pure-decode batch up to its next event in one
go (sized by :mod:`sim.decode_run`); the HTTP server paces steps against a wall clock,
the virtual-time runner does not.
"""

from __future__ import annotations

from collections import deque

from sim import decode_run, timing
from sim.prefix_cache import PrefixCache
from sim.profile import Profile
from sim.seq import Counters, Seq, SimRequest, State, StepResult

__all__ = ["HOLD_TIMEOUT", "Counters", "EngineCore", "Seq", "SimRequest", "State", "StepResult"]

HOLD_TIMEOUT = 120.0  # seconds a prefill side keeps blocks for a decode side that never asks


class EngineCore:
    """One simulated engine: queues, KV blocks, the scheduler and the step clock."""

    def __init__(self, profile: Profile, *, max_num_seqs: int | None = None, now: float = 0.0) -> None:
        self.profile = profile
        self.max_num_seqs = max_num_seqs or profile.max_num_seqs
        self.block_size = profile.block_size
        self.total_blocks = profile.kv_blocks
        self.free_blocks = self.total_blocks
        self.total_swap = profile.swap_blocks if profile.preemption_mode == "swap" else 0
        self.free_swap = self.total_swap
        self.now = now
        self.waiting: deque[Seq] = deque()
        self.loading: list[Seq] = []
        self.running: list[Seq] = []
        self.swapped: deque[Seq] = deque()
        self.held: dict[str, Seq] = {}
        self.seqs: dict[str, Seq] = {}
        self.counters = Counters()
        self.prefix_cache = PrefixCache(self.block_size)

    # -- state -----------------------------------------------------------------
    @property
    def num_running(self) -> int:
        """Requests in the running batch."""
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission (including those whose KV is arriving)."""
        return len(self.waiting) + len(self.loading)

    @property
    def num_swapped(self) -> int:
        """Requests preempted to swap space."""
        return len(self.swapped)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (0..1)."""
        return (self.total_blocks - self.free_blocks) / self.total_blocks

    @property
    def swap_usage(self) -> float:
        """Fraction of swap blocks in use (0..1); 0 without swap space."""
        return (self.total_swap - self.free_swap) / self.total_swap if self.total_swap else 0.0

    @property
    def used_tokens(self) -> int:
        """Tokens held in the KV cache (computed ones)."""
        return sum(s.num_computed for s in self.running) + sum(s.num_computed for s in self.loading) + sum(
            s.num_computed for s in self.held.values()
        )

    def has_work(self) -> bool:
        """Whether any request is still in the engine (running, queued, or receiving KV)."""
        return bool(self.running or self.waiting or self.swapped or self.loading)

    def next_event_time(self) -> float | None:
        """When this engine next needs to run: now, when KV arrives, or None (idle)."""
        if self.running or self.waiting or self.swapped:
            return self.now
        times = [s.ready_at for s in self.loading]
        return max(self.now, min(times)) if times else None

    # -- requests --------------------------------------------------------------
    def submit(self, req: SimRequest, at: float | None = None) -> Seq:
        """Queue a request; ``at`` (virtual time) moves an idle engine's clock forward."""
        if req.rid in self.seqs:
            raise ValueError(f"duplicate request id {req.rid!r}")
        if at is not None and at > self.now and not self.has_work():
            self.now = at
        seq = Seq(req=req, arrival=at if at is not None else self.now, num_tokens=req.context_tokens)
        self.seqs[req.rid] = seq
        self.waiting.append(seq)
        return seq

    def abort(self, rid: str) -> Seq | None:
        """Drop a request wherever it is and free its blocks (client went away)."""
        seq = self.seqs.get(rid)
        if seq is None or seq.state in (State.FINISHED,):
            return None
        if seq.state is State.HELD:
            self.release(rid)
            return seq
        if seq.state is State.RUNNING:
            self.running.remove(seq)
        elif seq.state is State.LOADING:
            self.loading.remove(seq)
        elif seq.state is State.WAITING:
            self.waiting.remove(seq)
        elif seq.state is State.SWAPPED:
            self.swapped.remove(seq)
            self.free_swap += seq.swap_blocks
            seq.swap_blocks = 0
        self._finish(seq, "abort", self.now)
        return seq

    def release(self, rid: str) -> bool:
        """Free the blocks a finished request kept for a remote decode."""
        seq = self.held.pop(rid, None)
        if seq is None:
            return False
        self._free(seq)
        seq.state = State.FINISHED
        self.seqs.pop(rid, None)
        return True

    # -- blocks ----------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _free(self, seq: Seq) -> None:
        if seq.held:
            shared = seq.shared
            self.free_blocks += self.prefix_cache.release(seq) - shared
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _grow(self, seq: Seq, tokens: int) -> bool:
        need = self._blocks_for(tokens) - seq.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        seq.blocks += need
        if self.prefix_cache.evictable > self.free_blocks:
            self.prefix_cache.evict(self.free_blocks)
        return True

    def _preempt(self, seq: Seq) -> float:
        """Take ``seq`` out of the batch; returns the swap-out time it costs."""
        self.running.remove(seq)
        seq.preemptions += 1
        self.counters.preemptions += 1
        cost = 0.0
        if self.total_swap and seq.blocks <= self.free_swap:
            self.free_swap -= seq.blocks
            seq.swap_blocks = seq.blocks
            cost = timing.swap_time(self.profile, seq.num_computed)
            self._free(seq)
            seq.state = State.SWAPPED
            self.swapped.append(seq)
        else:
            self._free(seq)
            seq.num_computed = 0  # recompute prompt and output so far
            seq.state = State.WAITING
            self.waiting.appendleft(seq)
        return cost

    def _start_cached(self, seq: Seq, budget: int) -> bool:
        """Start a new ``seq`` after its cached prefix blocks; False if its first chunk does not fit."""
        match = self.prefix_cache.plan(seq, budget, self.free_blocks)
        if match is None:
            return False
        self.prefix_cache.acquire(seq, match)
        self.free_blocks -= match.from_free
        self.counters.prefix_cache_hit_tokens += match.cached
        return True

    def _ready_loading(self) -> list[Seq]:
        return [s for s in self.loading if s.ready_at <= self.now]

    def expire_held(self, now: float | None = None) -> None:
        """Free blocks kept for remote decodes that never came within HOLD_TIMEOUT."""
        now = self.now if now is None else now
        for rid, seq in list(self.held.items()):
            if seq.finished_at is not None and now - seq.finished_at >= HOLD_TIMEOUT:
                self.release(rid)

    # -- scheduling --------------------------------------------------------------
    def _schedule(self) -> tuple[list[tuple[Seq, int]], list[Seq], float]:
        budget = self.profile.max_num_batched_tokens
        work: list[tuple[Seq, int]] = []
        preempted: list[Seq] = []
        extra = 0.0
        for seq in self._ready_loading():
            if len(self.running) >= self.max_num_seqs:
                break
            self.loading.remove(seq)
            seq.state = State.RUNNING
            self.running.append(seq)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            while not self._grow(seq, seq.num_computed + n):
                victim = self.running[-1]
                extra += self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.state is not State.RUNNING:
                break
            work.append((seq, n))
            budget -= n
            i += 1
        if preempted:
            return work, preempted, extra
        while self.swapped and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.swapped[0]
            if not self._grow(seq, seq.num_computed + 1):
                break
            self.swapped.popleft()
            self.free_swap += seq.swap_blocks
            seq.swap_blocks = 0
            extra += timing.swap_time(self.profile, seq.num_computed)
            seq.state = State.RUNNING
            self.running.append(seq)
            n = min(seq.num_tokens - seq.num_computed, budget)
            work.append((seq, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.req.kv_ready_tokens and not seq.imported and seq.preemptions == 0:
                if not self._grow(seq, seq.req.kv_ready_tokens):
                    break
                self.waiting.popleft()
                seq.imported = True
                seq.num_computed = seq.req.kv_ready_tokens
                self.counters.handoff_imports += 1
                self.counters.cached_prompt_tokens += seq.req.kv_ready_tokens
                if seq.first_scheduled is None:
                    seq.first_scheduled = self.now
                if seq.req.kv_delay > 0:
                    seq.state = State.LOADING
                    seq.ready_at = self.now + seq.req.kv_delay
                    self.loading.append(seq)
                    continue
                seq.state = State.RUNNING
                self.running.append(seq)
            else:
                if seq.req.prefix and seq.num_computed == 0 and not self._start_cached(seq, budget):
                    break
                n = min(seq.num_tokens - seq.num_computed, budget)
                if not self._grow(seq, seq.num_computed + n):
                    break
                self.waiting.popleft()
                seq.state = State.RUNNING
                self.running.append(seq)
                if seq.first_scheduled is None:
                    seq.first_scheduled = self.now
            n = min(seq.num_tokens - seq.num_computed, budget)
            if not self._grow(seq, seq.num_computed + n):
                continue  # imported KV fits but the next token's block doesn't: next step
            work.append((seq, n))
            budget -= n
        return work, preempted, extra

    def step(self) -> StepResult | None:
        """Run one engine iteration; None when there is nothing to do right now."""
        self.expire_held()
        work, preempted, extra = self._schedule()
        if not work and not preempted and self.loading and not self.running:
            # nothing to compute until handed-off KV arrives: the clock moves to that moment
            self.now = max(self.now, min(s.ready_at for s in self.loading))
            work, preempted, extra = self._schedule()
        if not work:
            if preempted:
                return StepResult(start=self.now, end=self.now, preempted=preempted, steps=0)
            return None
        start = self.now
        duration = timing.step_time(self.profile, [(n, seq.num_computed) for seq, n in work]) + extra
        end = start + duration
        result = StepResult(start=start, end=end, preempted=preempted, batch=len(work))
        prompt_work = 0
        for seq, n in work:
            decoding = n == 1 and seq.generated > 0 and seq.num_tokens - seq.num_computed == 1
            if not decoding:
                prompt_work += n
                seq.prefill_done += n
            seq.num_computed += n
            if seq.prefix_done < len(seq.chain):
                self.prefix_cache.insert(seq)
            if seq.num_computed < seq.num_tokens:
                continue  # a chunk of prefill: no token yet
            if seq.req.max_new_tokens == 0:
                result.finished.append(seq)
                continue
            seq.generated += 1
            seq.num_tokens += 1
            result.tokens.append((seq, 1))
            if seq.first_token is None:
                seq.first_token = end
            if seq.generated >= seq.req.max_new_tokens:
                result.finished.append(seq)
        result.prefill_tokens = prompt_work
        result.decode_tokens = len(result.tokens)
        return self._close_step(result, duration)

    # -- fast-forward ------------------------------------------------------------
    def _pure_decode(self) -> bool:
        if not self.running or self.swapped or self.loading or self.held:
            return False
        if len(self.running) > self.profile.max_num_batched_tokens:
            return False
        for seq in self.running:
            if seq.num_tokens - seq.num_computed != 1 or seq.generated == 0:
                return False
        if self.waiting:
            # admissions can only happen after a finish frees a seat or blocks
            head = self.waiting[0]
            seats = len(self.running) < self.max_num_seqs
            if head.req.prefix and not head.req.kv_ready_tokens and head.num_computed == 0:
                budget = self.profile.max_num_batched_tokens - len(self.running)
                return not (seats and self.prefix_cache.plan(head, budget, self.free_blocks) is not None)
            need = self._blocks_for(head.num_computed + 1) if head.req.kv_ready_tokens else self._blocks_for(
                head.num_computed + min(head.num_tokens - head.num_computed, self.profile.max_num_batched_tokens - len(self.running))
            )
            if seats and need <= self.free_blocks:
                return False
        return True

    def advance(self, horizon: float) -> StepResult | None:
        """Run decode steps in one go up to the next finish, block shortage or ``horizon``.

        Falls back to a single ``step()`` when the batch is not pure decode. At least one
        step runs when there is work, even past the horizon.
        """
        if not self._pure_decode():
            return self.step()
        k_max = decode_run.steps_until_event(self.running, self.free_blocks, self.block_size)
        if k_max <= 1:
            return self.step()
        batch = len(self.running)
        ctx = sum(s.num_computed for s in self.running)
        k = decode_run.steps_within(self.profile, batch, ctx, k_max, horizon - self.now)
        duration = timing.decode_run_time(self.profile, batch, ctx, k)
        start = self.now
        end = start + duration
        result = StepResult(start=start, end=end, steps=k, batch=batch)
        for seq in self.running:
            self._grow(seq, seq.num_computed + k)
            seq.num_computed += k
            seq.generated += k
            seq.num_tokens += k
            result.tokens.append((seq, k))
            if seq.generated >= seq.req.max_new_tokens:
                result.finished.append(seq)
        result.decode_tokens = batch * k
        return self._close_step(result, duration)

    # -- bookkeeping -------------------------------------------------------------
    def _close_step(self, result: StepResult, duration: float) -> StepResult:
        """Move the clock to the step's end, count it, and finish what it finished."""
        self.now = result.end
        self.counters.add_step(result, duration)
        for seq in result.finished:
            self.running.remove(seq)
            self._finish(seq, seq.req.finish_reason, result.end)
        return result

    def _finish(self, seq: Seq, reason: str, at: float) -> None:
        seq.finished_at = at
        seq.finish_reason = reason
        self.counters.finished[reason] = self.counters.finished.get(reason, 0) + 1
        if seq.req.hold_kv and reason != "abort":
            seq.state = State.HELD
            self.held[seq.rid] = seq
            return
        self._free(seq)
        seq.state = State.FINISHED
        self.seqs.pop(seq.rid, None)
