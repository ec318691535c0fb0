"""Dialect parsers against every real /metrics capture in shared/fixtures/metrics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from syshaxd.engines import DIALECTS, MetricSet, MetricsParseError, get_dialect
from syshaxd.engines.llamacpp import read_slots
from syshaxd.snapshot import EngineMetrics
from tests.shared import CHECKOUT, ENV, shared


def fixture(name: str) -> str:
    return shared("fixtures", "metrics", name).read_text(encoding="utf-8")


def parse(dialect: str, name: str) -> EngineMetrics:
    return get_dialect(dialect).parse(fixture(name))


# Every fixture file must have a test below; this catches a capture added without one.
TESTED = {
    "llamacpp-2025-06-pr13196-comment-fragment.prom",
    "llamacpp-server-0c1e57098-tiny-capture-idle.prom",
    "llamacpp-server-0c1e57098-tiny-capture.prom",
    "llamacpp-server-slots-tiny-capture.json",
    "sglang-docs-production-metrics-llama3.1-8b.prom",
    "vllm-v0.6-issue8819-opt125m-fragment.prom",
    "vllm-v0.7-aibrix-runtime-doc-qwen2.5-coder-1.5b.prom",
    "vllm-v1-0.10.0-prodstack-issue617-glm4.5-fragment.prom",
    "vllm-v1-0.8-prodstack-issue318-qwen2.5-coder-32b-fragment.prom",
    "vllm-v1-design-doc-http-metrics-grep.prom",
    "vllm-v1-design-doc-llama3.1-8b-elided.prom",
}


def test_every_fixture_file_has_a_parser_test() -> None:
    present = {p.name for p in shared("fixtures", "metrics").iterdir() if p.suffix in (".prom", ".json")}
    assert present <= TESTED, f"untested fixtures: {sorted(present - TESTED)}"


def test_vllm_v0_7_aibrix_capture() -> None:
    m = parse("vllm-v0", "vllm-v0.7-aibrix-runtime-doc-qwen2.5-coder-1.5b.prom")
    assert (m.running, m.waiting, m.swapped) == (0, 0, 0)
    assert m.kv_cache_usage == 0.0 and m.cpu_swap_usage == 0.0
    assert m.preemptions_total == 0.0
    assert m.prompt_tokens_total == 148.0
    assert m.generation_tokens_total == 955.0
    assert m.requests_finished_total == 4.0
    # The throughput gauges vanished after 0.7 and are absent here: no invented rate.
    assert m.prefill_tps is None and m.decode_tps is None
    # iteration_tokens_total is cut off before +Inf/_count: the set still reads its buckets.
    hist = MetricSet.parse(fixture("vllm-v0.7-aibrix-runtime-doc-qwen2.5-coder-1.5b.prom")).histogram(
        "vllm:iteration_tokens_total"
    )
    assert hist is not None
    assert hist.buckets[0] == (1.0, 994.0)
    assert hist.buckets[-1] == (math.inf, 998.0)
    assert hist.sum == 1103.0


def test_vllm_v0_6_fragment_has_only_request_param_histograms() -> None:
    text = fixture("vllm-v0.6-issue8819-opt125m-fragment.prom")
    m = get_dialect("vllm-v0").parse(text)
    assert m == EngineMetrics()  # no engine numbers in this fragment, and nothing made up
    best_of = MetricSet.parse(text).histogram("vllm:request_params_best_of")
    assert best_of is not None
    assert best_of.buckets == ((2.0, 1.0), (5.0, 1.0), (10.0, 1.0), (20.0, 1.0), (math.inf, 1.0))
    assert (best_of.count, best_of.sum) == (1.0, 1.0)
    n = MetricSet.parse(text).histogram("vllm:request_params_n")
    assert n is not None and n.buckets[0] == (1.0, 1.0) and n.count == 1.0


def test_vllm_v1_0_8_fragment_uses_old_cache_name() -> None:
    m = parse("vllm-v1", "vllm-v1-0.8-prodstack-issue318-qwen2.5-coder-32b-fragment.prom")
    assert (m.running, m.waiting) == (0, 0)
    assert m.kv_cache_usage == 0.0  # from vllm:gpu_cache_usage_perc: no kv_cache_usage_perc yet
    assert m.prompt_tokens_total is None
    ms = MetricSet.parse(fixture("vllm-v1-0.8-prodstack-issue318-qwen2.5-coder-32b-fragment.prom"))
    assert ms.total("process_open_fds") == 45.0
    assert ms.total("process_cpu_seconds_total") == pytest.approx(439.72)


def test_vllm_v1_0_10_fragment_engine_label_and_created_series() -> None:
    text = fixture("vllm-v1-0.10.0-prodstack-issue617-glm4.5-fragment.prom")
    m = get_dialect("vllm-v1").parse(text)
    assert m.kv_cache_usage == pytest.approx(9.75010481363281e-06)
    ms = MetricSet.parse(text)
    assert ms.total("vllm:prefix_cache_queries_total") == 32.0
    assert ms.total("vllm:gpu_prefix_cache_hits_total") == 0.0
    assert not any(name.endswith("_created") for name in ms.names())


def test_vllm_v1_prefill_time_histogram_sum_is_the_prefill_seconds() -> None:
    text = "\n".join([
        "# TYPE vllm:request_prefill_time_seconds histogram",
        'vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0',
        'vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 1.25',
        'vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 3.0',
        'vllm:request_prefill_time_seconds_sum{engine="1",model_name="m"} 0.5', ""])
    assert get_dialect("vllm-v1").parse(text).prefill_seconds_total == pytest.approx(1.75)
    assert parse("vllm-v1", "vllm-v1-design-doc-llama3.1-8b-elided.prom").prefill_seconds_total is None


def test_vllm_v1_design_doc_elided_capture() -> None:
    m = parse("vllm-v1", "vllm-v1-design-doc-llama3.1-8b-elided.prom")
    assert m.running == 8
    assert m.waiting is None  # elided in the doc: unknown, not zero
    assert m.generation_tokens_total == 27453.0
    assert m.requests_finished_total == 132.0  # 1 stop + 131 length + 0 abort
    ttft = m.histogram("ttft")
    assert ttft is not None
    assert ttft.count == 140.0
    assert ttft.buckets[3] == (0.02, 13.0)
    assert ttft.buckets[-1] == (math.inf, 140.0)  # filled in from _count
    assert math.isnan(ttft.sum)  # not in the excerpt
    median = ttft.quantile(0.5)
    assert median is not None and 0.02 < median < 0.04  # 70th of 140 lies in (0.02, 0.04]


def test_vllm_v1_http_metrics_grep_has_no_engine_numbers() -> None:
    text = fixture("vllm-v1-design-doc-http-metrics-grep.prom")
    assert get_dialect("vllm-v1").parse(text) == EngineMetrics()
    ms = MetricSet.parse(text)
    assert ms.total("http_requests_total") == 201.0
    assert ms.total("http_request_duration_highr_seconds_count") == 201.0


def test_sglang_docs_capture() -> None:
    m = parse("sglang", "sglang-docs-production-metrics-llama3.1-8b.prom")
    assert m.kv_cache_usage == pytest.approx(0.28)
    assert (m.running, m.waiting) == (162, 2826)
    assert m.prompt_tokens_total == 8.128902e06
    assert m.generation_tokens_total == 7.557572e06
    assert m.decode_tps == pytest.approx(86.50814177726902)  # the gen_throughput gauge
    ttft, tpot, e2e = m.histogram("ttft"), m.histogram("tpot"), m.histogram("e2e")
    assert ttft is not None and tpot is not None and e2e is not None
    assert ttft.count == 11008.0 and ttft.sum == pytest.approx(2.3518979474117756e06)
    assert ttft.buckets[4] == (0.04, 1.0)
    assert tpot.count == 7.400757e06 and tpot.buckets[-2] == (2.5, 7.389414e06)
    assert e2e.count == 11228.0 and e2e.buckets[-2] == (60.0, 1513.0)
    assert {name for name, _ in m.histograms} == {"ttft", "tpot", "e2e"}  # not func_latency


def test_llamacpp_capture_under_load() -> None:
    m = parse("llamacpp", "llamacpp-server-0c1e57098-tiny-capture.prom")
    assert (m.running, m.waiting) == (4, 2)
    assert m.prompt_tokens_total == 261.0
    assert m.generation_tokens_total == 1354.0
    # The *_tokens_seconds gauges (6596.07, 76.94) reset on every scrape: ignored.
    assert m.prefill_tps is None and m.decode_tps is None
    assert m.kv_cache_usage is None  # not in /metrics any more: /slots has it
    tpot = m.histogram("tpot")
    assert tpot is not None and tpot.count == 1354.0 and tpot.sum == pytest.approx(17.4422)
    # Time spent prefilling, a counter: with the prompt tokens, the prefill speed.
    assert m.prefill_seconds_total == pytest.approx(0.039569)


def test_llamacpp_capture_idle() -> None:
    m = parse("llamacpp", "llamacpp-server-0c1e57098-tiny-capture-idle.prom")
    assert (m.running, m.waiting) == (0, 0)
    assert m.prompt_tokens_total == 1135.0
    assert m.generation_tokens_total == 22247.0
    tpot = m.histogram("tpot")
    assert tpot is not None and tpot.sum / tpot.count == pytest.approx(90.1622 / 22247)


def test_llamacpp_2025_06_fragment() -> None:
    m = parse("llamacpp", "llamacpp-2025-06-pr13196-comment-fragment.prom")
    assert m.prompt_tokens_total == 143.0
    assert m.prefill_seconds_total == pytest.approx(8.168)
    assert m.generation_tokens_total == 673.0
    assert m.running is None and m.waiting is None and m.kv_cache_usage is None


def test_llamacpp_slots_capture() -> None:
    usage = read_slots(fixture("llamacpp-server-slots-tiny-capture.json")).kv_cache_usage
    # 4 busy slots of n_ctx 1024; each holds its prompt plus what it decoded so far, which is
    # what a busy slot's n_prompt_tokens says (374 = a 35-token prompt + 339 decoded).
    held = 374 + 373 + 386 + 374
    assert usage == pytest.approx(held / 4096)


def test_llamacpp_slots_capture_counts_tokens_decoded_so_far() -> None:
    reading = read_slots(fixture("llamacpp-server-slots-tiny-capture.json"))
    assert reading.decoding_tokens == 339 + 338 + 351 + 339  # the busy slots' n_decoded


def test_llamacpp_slots_idle_slots_hold_nothing() -> None:
    body = '[{"id":0,"n_ctx":512,"is_processing":false,"n_prompt_tokens":100},' \
           ' {"id":1,"n_ctx":512,"is_processing":true,"n_prompt_tokens":128,"next_token":[{"n_decoded":28}]}]'
    assert read_slots(body).kv_cache_usage == pytest.approx(128 / 1024)
    assert read_slots(body).decoding_tokens == 28  # the idle slot's last request is counted already


@pytest.mark.parametrize(
    "body", ["not json", '{"slots": []}', "[1, 2]", '[{"id": 0}]', '[{"n_ctx": -1}]']
)
def test_llamacpp_slots_bad_bodies_are_parse_errors(body: str) -> None:
    with pytest.raises(MetricsParseError):
        read_slots(body)


def test_openai_dialect_has_no_metrics_path() -> None:
    dialect = get_dialect("openai")
    assert dialect.metrics_path is None
    assert dialect.parse("anything at all") == EngineMetrics()


def test_unknown_dialect_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="vllm-v1"):
        get_dialect("tgi")


def test_every_config_dialect_is_known() -> None:
    from typing import get_args

    from syshaxd.config import Dialect

    assert set(get_args(Dialect)) == set(DIALECTS)


def test_missing_shared_data_fails_saying_what_where_and_how(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "fixtures").mkdir()
    assert shared("fixtures") == tmp_path / "fixtures"
    with pytest.raises(pytest.fail.Exception) as info:
        shared("fixtures", "metrics")
    message = str(info.value)
    assert f"{tmp_path / 'fixtures' / 'metrics'} does not exist" in message
    assert f"${ENV} is {tmp_path}" in message
    assert f"set ${ENV} to a copy" in message
    monkeypatch.delenv(ENV)
    with pytest.raises(pytest.fail.Exception) as info:
        shared("no-such-part")
    assert f"beside the checkout: {CHECKOUT.parent / 'shared'}" in str(info.value)
    assert shared("fixtures", "metrics") == CHECKOUT.parent / "shared" / "fixtures" / "metrics"
