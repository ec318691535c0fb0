"""How dialects add up labelled series, and that arbitrary text never crashes a parser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syshaxd.engines import DIALECTS, MetricsParseError, get_dialect
from syshaxd.snapshot import EngineMetrics

VLLM_TWO_ENGINES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:generation_tokens_total{engine="1",model_name="m"} 50.0
vllm:generation_tokens_created{engine="1",model_name="m"} 1.7e9
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="m"} 10.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 20.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 20.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 1.5
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.05",model_name="m"} 4.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="+Inf",model_name="m"} 5.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 5.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="m"} 0.25
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 999.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 999.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 9.0
"""


def test_vllm_v1_sums_over_engines_and_ignores_created() -> None:
    m = get_dialect("vllm-v1").parse(VLLM_TWO_ENGINES)
    assert (m.running, m.waiting) == (8, 1)
    assert m.generation_tokens_total == 150.0  # not 150 + two 1.7e9 timestamps
    assert m.kv_cache_usage == pytest.approx(0.4)  # mean of fractions; the new name wins
    tpot = m.histogram("tpot")
    assert tpot is not None  # inter_token_latency preferred over the deprecated name
    assert tpot.buckets == ((0.05, 14.0), (math.inf, 25.0))
    assert (tpot.count, tpot.sum) == (25.0, 1.75)


SGLANG_RANKS = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="0",model_name="m",pp_rank="0",tp_rank="1"} 4.0
sglang:num_running_reqs{dp_rank="1",model_name="m",pp_rank="0",tp_rank="0"} 2.0
sglang:num_running_reqs{dp_rank="1",model_name="m",pp_rank="0",tp_rank="1"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 7.0
sglang:num_queue_reqs{dp_rank="0",model_name="m",pp_rank="1",tp_rank="0"} 7.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 0.5
sglang:token_usage{dp_rank="0",model_name="m",pp_rank="0",tp_rank="1"} 0.5
sglang:token_usage{dp_rank="1",model_name="m",pp_rank="0",tp_rank="0"} 0.1
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 30.0
sglang:gen_throughput{dp_rank="0",model_name="m",pp_rank="0",tp_rank="1"} 30.0
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 1000.0
sglang:generation_tokens_total{dp_rank="0",model_name="m",pp_rank="0",tp_rank="1"} 1000.0
"""


def test_sglang_counts_tensor_and_pipeline_ranks_once_and_adds_data_parallel_ranks() -> None:
    m = get_dialect("sglang").parse(SGLANG_RANKS)
    assert m.running == 6  # 4 (dp0, seen by two TP ranks) + 2 (dp1)
    assert m.waiting == 7  # one queue seen by two pipeline stages
    assert m.kv_cache_usage == pytest.approx(0.3)  # mean over dp ranks
    assert m.decode_tps == 30.0
    assert m.generation_tokens_total == 1000.0


def test_nonsense_values_become_unknown_not_numbers() -> None:
    text = """\
vllm:num_requests_running -3
vllm:num_requests_waiting NaN
vllm:kv_cache_usage_perc 7.5
vllm:generation_tokens_total +Inf
vllm:prompt_tokens_total 12
"""
    m = get_dialect("vllm-v1").parse(text)
    assert m.running is None and m.waiting is None and m.kv_cache_usage is None
    assert m.generation_tokens_total is None
    assert m.prompt_tokens_total == 12.0


@pytest.mark.parametrize("name", sorted(DIALECTS))
@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        "vllm:num_requests_running{model_name=\"m\" 3",
        "# TYPE x histogram\nx_bucket{le=\"abc\"} 1\n",
        "\x00\x01\x02",
    ],
)
def test_garbage_is_a_parse_error_or_an_empty_record(name: str, text: str) -> None:
    try:
        m = get_dialect(name).parse(text)
    except MetricsParseError as exc:
        assert str(exc)  # a message the monitor can show
    else:
        assert isinstance(m, EngineMetrics)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400), st.sampled_from(sorted(DIALECTS)))
def test_parsers_never_raise_anything_but_parse_errors(text: str, name: str) -> None:
    try:
        m = get_dialect(name).parse(text)
    except MetricsParseError:
        return
    assert isinstance(m, EngineMetrics)
    if m.kv_cache_usage is not None:
        assert 0.0 <= m.kv_cache_usage <= 1.0
    for value in (m.running, m.waiting, m.swapped):
        assert value is None or value >= 0


_LINE = st.one_of(
    st.builds(
        lambda name, labels, value: f"{name}{labels} {value}",
        st.sampled_from(
            ["vllm:num_requests_running", "vllm:kv_cache_usage_perc", "sglang:num_running_reqs",
             "llamacpp:requests_processing", "vllm:time_to_first_token_seconds_bucket",
             "vllm:generation_tokens_total", "x_created"]
        ),
        st.sampled_from(["", '{engine="0"}', '{le="0.1"}', '{le="+Inf",engine="1"}', '{tp_rank="1"}', "{"]),
        st.one_of(st.floats(allow_nan=True), st.text(max_size=5)),
    ),
    st.sampled_from(["# TYPE vllm:num_requests_running gauge", "# TYPE h histogram", "...", "", "# HELP x y"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, max_size=12), st.sampled_from(sorted(DIALECTS)))
def test_parsers_survive_near_valid_prometheus_text(lines: list[str], name: str) -> None:
    try:
        get_dialect(name).parse("\n".join(lines))
    except MetricsParseError:
        pass
