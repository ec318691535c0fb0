"""`syshax calibrate` against the real llama-server the tests build (tiny model): it reads the
server's slots and context and fits both terms.

How well the fitted profile reproduces the server (one workload live and in virtual time:
TTFT, TPOT and output tokens/s within 20%, the median of five pairs) compares wall-clock
timings, so it is measured by ``python bench/accuracy.py`` on a quiet machine; ``make test``
runs that benchmark's quick form, one calibrate-then-run pair, unjudged
(tests/bench/test_benchmarks_run.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim.calibrate.calibrate import Options, calibrate
from tests.plugins.llama import LlamaServer

pytestmark = pytest.mark.llama


def test_calibrating_llama_server_reads_its_slots_and_context_and_fits_both_terms(
        llama_server: LlamaServer, short_tmp: Path) -> None:
    cal = calibrate(Options(url=llama_server.url, out=short_tmp / "llama.yaml", rounds=2, settle=0.1))
    assert cal.facts.dialect == "llamacpp"
    assert cal.profile.max_num_seqs == llama_server.n_parallel
    assert cal.profile.kv_capacity_tokens == llama_server.n_ctx
    assert cal.profile.max_model_len == llama_server.n_ctx // llama_server.n_parallel
    assert [q.term.split()[0] for q in cal.quality] == ["prefill", "decode"]
    # How much of the measured spread each fit explains depends on what else shares the
    # cores (a few ms per prefill on the tiny model): reported, not judged here.
    assert all(math.isfinite(q.r2) and q.r2 <= 1 for q in cal.quality), cal.quality
    assert cal.path.exists()
