"""`syshax calibrate` against the real llama-server the tests build (tiny model).

Calibrate, then run one workload live and in virtual time with the fitted profile (24
Poisson requests at 8/s, prompts of 128-768 random token ids, 32-96 output tokens, against
``-np 4 -c 4096 -t 1``): the median of three pairs, each figure held to 50%, which catches
a wrong model (a missing unit conversion is off by 4x) whatever else shares the cores (one
pair alone came out -43% on TPOT once beside a full ``make test``). The 20% figure of
issue 24 (the median of five pairs, on a quiet machine) is measured by
``python bench/accuracy.py``. Also: calibrate reads the server's slots and context.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._accuracy_llama import median_errors, pair_line, run_pair
from sim.calibrate.calibrate import Options, calibrate
from tests.plugins.llama import LlamaServer

pytestmark = pytest.mark.llama

#: Loose on purpose: wall-clock timings beside the rest of the suite (see the docstring).
BOUND = 0.5
PAIRS = 3


def test_the_fitted_profile_reproduces_the_engine_on_a_workload_within_50_percent(
        llama_server: LlamaServer, short_tmp: Path) -> None:
    pairs = [run_pair(llama_server.url, short_tmp / f"llama-{k}.yaml", seed=k) for k in range(PAIRS)]
    found = median_errors(pairs)
    lines = [pair_line(k, live, sim) for k, (live, sim) in enumerate(pairs)]
    report = "\n".join(lines) + "\nmedian error: " + ", ".join(f"{k} {v:+.1%}" for k, v in found.items())
    print(report)
    assert all(abs(v) <= BOUND for v in found.values()), report


def test_calibrating_llama_server_reads_its_slots_and_context_and_fits_both_terms(
        llama_server: LlamaServer, short_tmp: Path) -> None:
    cal = calibrate(Options(url=llama_server.url, out=short_tmp / "llama.yaml", rounds=2, settle=0.1))
    assert cal.facts.dialect == "llamacpp"
    assert cal.profile.max_num_seqs == llama_server.n_parallel
    assert cal.profile.kv_capacity_tokens == llama_server.n_ctx
    assert cal.profile.max_model_len == llama_server.n_ctx // llama_server.n_parallel
    assert [q.term.split()[0] for q in cal.quality] == ["prefill", "decode"]
    # Each fit explains most of what it measured. Two short rounds on the tiny model take a few
    # ms per prefill, so the other test worker on the same two cores is most of the noise: the
    # prefill fit came out at r2 0.70 once in the full suite. A fit against the wrong variable
    # is near 0; the fits' accuracy is bench/accuracy.py's, on a quiet machine.
    assert all(q.r2 > 0.5 for q in cal.quality), cal.quality
