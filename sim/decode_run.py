"""How many decode steps a batch can take in one go: the sizing behind the core's fast-forward.

Between events every step of a pure-decode batch is alike (one token per sequence), so
:meth:`sim.core.EngineCore.advance` runs k of them at once and sums their time in closed
form. These pure functions choose k: no sequence may finish before the last step, the
batch's new KV blocks must fit, and the run should end within the time left before the
next event.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim import timing
from sim.profile import Profile
from sim.seq import Seq


def extra_blocks(running: Sequence[Seq], block_size: int, steps: int) -> int:
    """KV blocks the batch needs beyond those it holds to decode ``steps`` more tokens each."""
    return sum(-(-(s.num_computed + steps) // block_size) - s.blocks for s in running)


def steps_until_event(running: Sequence[Seq], free_blocks: int, block_size: int) -> int:
    """The most decode steps before the first sequence finishes or the free blocks run out.

    ``running`` must not be empty. 1 or less: take one ordinary step instead.
    """
    most = min(s.req.max_new_tokens - s.generated for s in running)
    # every sequence needs at most one new block per block_size steps: this many always fit
    safe = (free_blocks // len(running)) * block_size
    if safe >= most:
        return most
    lo, hi = safe, most  # largest k whose new blocks fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if extra_blocks(running, block_size, mid) <= free_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def steps_within(profile: Profile, batch: int, context: int, most: int, budget: float) -> int:
    """The most of ``most`` decode steps whose run ends within ``budget`` seconds; at least 1.

    ``context`` is the batch's cached tokens before the first step.
    """
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if timing.decode_run_time(profile, batch, context, mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
