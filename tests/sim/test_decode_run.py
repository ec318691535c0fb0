"""Sizing a fast-forwarded run of decode steps: finishes, KV blocks and the time budget."""

from __future__ import annotations

import pytest

from sim import timing
from sim.decode_run import extra_blocks, steps_until_event, steps_within
from sim.profile import load_profile
from sim.seq import Seq, SimRequest


def decoding(computed: int, blocks: int, remaining: int) -> Seq:
    """A sequence in the middle of its decode: ``remaining`` tokens still to write."""
    req = SimRequest(f"r{computed}-{remaining}", context_tokens=computed, max_new_tokens=remaining + 1)
    return Seq(req=req, arrival=0.0, num_tokens=computed + 1, num_computed=computed, generated=1, blocks=blocks)


def test_extra_blocks_counts_only_blocks_beyond_those_held() -> None:
    batch = [decoding(10, 1, 50), decoding(16, 1, 50)]
    assert extra_blocks(batch, 16, 6) == 1  # 16 tokens still fit the first block; the second needs one more
    assert extra_blocks(batch, 16, 7) == 2


@pytest.mark.parametrize(("free", "expected"), [
    (100, 20),  # blocks to spare: the first finish ends the run
    (2, 20),  # just enough: a block each, and the first finish comes before the next block
    (1, 6),  # one block for two sequences: the run ends where their blocks are full
    (0, 6),
])
def test_steps_until_event_stops_at_the_first_finish_or_block_shortage(free: int, expected: int) -> None:
    batch = [decoding(10, 1, 20), decoding(10, 1, 30)]
    assert steps_until_event(batch, free, 16) == expected


def test_steps_within_fits_the_run_in_the_budget_and_takes_at_least_one_step() -> None:
    profile = load_profile("tiny")
    five = timing.decode_run_time(profile, 4, 4000, 5)
    assert steps_within(profile, 4, 4000, 100, five) == 5
    assert steps_within(profile, 4, 4000, 3, five) == 3
    assert steps_within(profile, 4, 4000, 100, 0.0) == 1
