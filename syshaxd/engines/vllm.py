"""vLLM's /metrics: the V0 engine (0.6–0.7, the sysHAX base) and the V1 engine (current).

Names checked against the captures in ``shared/fixtures/metrics``. V1 (>= 0.10) labels
every series with ``engine`` (one per data-parallel engine core): counts and counters add
up over engines, the KV-cache fraction is averaged.
"""

from __future__ import annotations

from dataclasses import replace

from syshaxd.engines.base import Dialect, count, fraction, nonneg
from syshaxd.engines.promtext import MetricSet, histograms, wanted_samples
from syshaxd.snapshot import EngineMetrics

_HISTOGRAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ttft", ("vllm:time_to_first_token_seconds",)),
    # 0.11 renamed the per-token histogram; older builds only have the first name.
    ("tpot", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
    ("e2e", ("vllm:e2e_request_latency_seconds",)),
)


def _common(m: MetricSet) -> EngineMetrics:
    return EngineMetrics(
        running=count(m.total("vllm:num_requests_running")),
        waiting=count(m.total("vllm:num_requests_waiting")),
        preemptions_total=nonneg(m.total("vllm:num_preemptions_total")),
        prompt_tokens_total=nonneg(m.total("vllm:prompt_tokens_total")),
        generation_tokens_total=nonneg(m.total("vllm:generation_tokens_total")),
        requests_finished_total=nonneg(m.total("vllm:request_success_total")),
        histograms=histograms(m, _HISTOGRAMS),
    )


_COMMON = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_preemptions_total",
           "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
           "vllm:num_requests_swapped")
_HISTOGRAM_NAMES = tuple(name for _, names in _HISTOGRAMS for name in names)
_V0 = wanted_samples((*_COMMON, "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc",
                      "vllm:avg_prompt_throughput_toks_per_s", "vllm:avg_generation_throughput_toks_per_s"),
                     _HISTOGRAM_NAMES)
_V1 = wanted_samples((*_COMMON, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                      "vllm:request_prefill_time_seconds_sum"), _HISTOGRAM_NAMES)


def parse_v0(text: str) -> EngineMetrics:
    """Read a vLLM V0 engine's /metrics text into the common record."""
    m = MetricSet.parse(text, _V0)
    return replace(
        _common(m),
        kv_cache_usage=fraction(m.mean("vllm:gpu_cache_usage_perc")),
        cpu_swap_usage=fraction(m.mean("vllm:cpu_cache_usage_perc")),
        swapped=count(m.total("vllm:num_requests_swapped")),
        # These gauges were removed after 0.7; when present they are the engine's own figure.
        prefill_tps=nonneg(m.total("vllm:avg_prompt_throughput_toks_per_s")),
        decode_tps=nonneg(m.total("vllm:avg_generation_throughput_toks_per_s")),
    )


def parse_v1(text: str) -> EngineMetrics:
    """Read a vLLM V1 engine's /metrics text into the common record."""
    m = MetricSet.parse(text, _V1)
    # 0.9-0.11 publish both names; early V1 only the old one.
    kv = m.first_present("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    return replace(
        _common(m),
        kv_cache_usage=fraction(m.mean(kv)) if kv else None,
        swapped=count(m.total("vllm:num_requests_swapped")),
        # Per request, from its first scheduling to its first token: prompts sharing a step
        # each count it, so the prefill speed taken from it is a lower bound.
        prefill_seconds_total=nonneg(m.total("vllm:request_prefill_time_seconds_sum")),
    )


VLLM_V0 = Dialect(
    name="vllm-v0",
    metrics_path="/metrics",
    parse=parse_v0,
    description="vLLM 0.6-0.7 (V0 engine, the sysHAX base)",
)
VLLM_V1 = Dialect(
    name="vllm-v1",
    metrics_path="/metrics",
    parse=parse_v1,
    description="vLLM V1 engine (0.8 and later)",
)
