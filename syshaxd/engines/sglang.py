"""SGLang ``--enable-metrics``.

Newer builds label series with ``tp_rank``/``pp_rank`` (and ``dp_rank``): every tensor or
pipeline rank of one scheduler reports the same requests, so those labels are collapsed
(one value per group, the largest), while data-parallel ranks are separate work and add up.
"""

from __future__ import annotations

from syshaxd.engines.base import Dialect, count, fraction, nonneg
from syshaxd.engines.promtext import MetricSet, histograms, wanted_samples
from syshaxd.snapshot import EngineMetrics

RANK_LABELS = ("tp_rank", "pp_rank")

_HISTOGRAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ttft", ("sglang:time_to_first_token_seconds",)),
    ("tpot", ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")),
    ("e2e", ("sglang:e2e_request_latency_seconds",)),
)


_WANTED = wanted_samples(
    ("sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:prompt_tokens_total",
     "sglang:generation_tokens_total", "sglang:num_requests_total", "sglang:gen_throughput"),
    [name for _, names in _HISTOGRAMS for name in names],
)


def parse(text: str) -> EngineMetrics:
    """Read SGLang's /metrics text into the common record."""
    m = MetricSet.parse(text, _WANTED)
    c = RANK_LABELS
    return EngineMetrics(
        kv_cache_usage=fraction(m.mean("sglang:token_usage", c)),
        running=count(m.total("sglang:num_running_reqs", c)),
        waiting=count(m.total("sglang:num_queue_reqs", c)),
        prompt_tokens_total=nonneg(m.total("sglang:prompt_tokens_total", c)),
        generation_tokens_total=nonneg(m.total("sglang:generation_tokens_total", c)),
        requests_finished_total=nonneg(m.total("sglang:num_requests_total", c)),
        # The engine's own decode throughput gauge wins over counter deltas.
        decode_tps=nonneg(m.total("sglang:gen_throughput", c)),
        histograms=histograms(m, _HISTOGRAMS, c),
    )


SGLANG = Dialect(
    name="sglang",
    metrics_path="/metrics",
    parse=parse,
    description="SGLang --enable-metrics",
)
