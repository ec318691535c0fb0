"""/metrics in every dialect parses like the real captures: same names, types and label sets."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.core import EngineCore, SimRequest
from sim.metrics import DIALECTS, Override, Recorder
from sim.profile import load_profile
from tests.shared import shared

FILES = {
    "vllm-v1": ["vllm-v1-0.10.0-prodstack-issue617-glm4.5-fragment.prom",
                "vllm-v1-0.8-prodstack-issue318-qwen2.5-coder-32b-fragment.prom",
                "vllm-v1-design-doc-llama3.1-8b-elided.prom"],
    "vllm-v0": ["vllm-v0.7-aibrix-runtime-doc-qwen2.5-coder-1.5b.prom", "vllm-v0.6-issue8819-opt125m-fragment.prom"],
    "llamacpp": ["llamacpp-server-0c1e57098-tiny-capture.prom", "llamacpp-server-0c1e57098-tiny-capture-idle.prom",
                 "llamacpp-2025-06-pr13196-comment-fragment.prom"],
    "sglang": ["sglang-docs-production-metrics-llama3.1-8b.prom"],
}
# Families a server process adds that are not the engine's own (prometheus_client's process
# collector, the HTTP middleware, LoRA and sampling-parameter statistics).
NOT_SIMULATED = ("process_", "http_", "vllm:request_params_")
CORE = {
    "vllm-v1": {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                "vllm:gpu_cache_usage_perc", "vllm:prompt_tokens", "vllm:generation_tokens",
                "vllm:num_preemptions", "vllm:request_success", "vllm:time_to_first_token_seconds",
                "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"},
    "vllm-v0": {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
                "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc", "vllm:prompt_tokens",
                "vllm:generation_tokens", "vllm:avg_generation_throughput_toks_per_s"},
    "llamacpp": {"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted",
                 "llamacpp:prompt_tokens"},
    "sglang": {"sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
               "sglang:generation_tokens"},
}

Shape = dict[str, tuple[str, set[frozenset[str]]]]  # family -> (type, label-name sets per sample kind)


def shape(text: str) -> Shape:
    text = "\n".join(line for line in text.splitlines() if line.strip() != "...") + "\n"
    out: Shape = {}
    for family in text_string_to_metric_families(text):
        labels = {frozenset(k for k in s.labels if k != "le") for s in family.samples}
        kind, seen = out.get(family.name, (family.type, set()))
        out[family.name] = (kind, seen | labels)
    return out


def fixture_shape(dialect: str) -> Shape:
    merged: Shape = {}
    for name in FILES[dialect]:
        for family, (kind, labels) in shape(shared("fixtures", "metrics", name).read_text(encoding="utf-8")).items():
            if kind == "unknown" or family.startswith(NOT_SIMULATED):
                continue
            old_kind, old_labels = merged.get(family, (kind, set()))
            merged[family] = (kind, old_labels | labels)
    return merged


def busy_recorder(dialect: str) -> Recorder:
    core = EngineCore(load_profile("tiny"))
    recorder = Recorder(core, dialect)
    for i in range(6):
        core.submit(SimRequest(f"r{i}", context_tokens=200 + 50 * i, max_new_tokens=30,
                               finish_reason="stop" if i % 2 else "length"))
    for _ in range(12):
        result = core.step()
        if result is not None:
            recorder.on_step(result)
    return recorder


def test_fixtures_are_there() -> None:
    for names in FILES.values():
        for name in names:
            assert shared("fixtures", "metrics", name).is_file()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_metrics_have_the_real_names_types_and_labels(dialect: str) -> None:
    recorder = busy_recorder(dialect)
    ours = shape(recorder.render("ds-32b", recorder.core.now))
    theirs = fixture_shape(dialect)
    assert CORE[dialect] <= set(ours)
    missing = {f for f in theirs if f not in ours and not f.endswith("lora_requests_info")}
    assert not missing, f"families in the real captures but not simulated: {sorted(missing)}"
    for family, (kind, labelsets) in theirs.items():
        if family not in ours or not labelsets:  # a truncated capture may show a family without samples
            continue
        our_kind, our_labels = ours[family]
        assert our_kind == kind, family
        # older v1 captures predate the `engine` label; 0.10 has it
        normalise = (lambda s: s - {"engine"}) if dialect == "vllm-v1" else (lambda s: s)
        assert {normalise(s) for s in our_labels} == {normalise(s) for s in labelsets}, family


def test_v1_has_the_engine_label_and_created_series_like_0_10() -> None:
    text = busy_recorder("vllm-v1").render("ds-32b", 1.0)
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="ds-32b"}' in text
    assert "# TYPE vllm:prompt_tokens_created gauge" in text


def test_llamacpp_metrics_have_no_labels_and_integer_counters() -> None:
    text = busy_recorder("llamacpp").render("ds-32b", 1.0)
    assert "{" not in text
    counter_line = next(line for line in text.splitlines() if line.startswith("llamacpp:tokens_predicted_total "))
    assert "." not in counter_line.split()[1]


def test_llamacpp_generated_tokens_are_counted_when_a_request_ends_or_is_aborted() -> None:
    core = EngineCore(load_profile("tiny"))
    recorder = Recorder(core, "llamacpp")
    core.submit(SimRequest("short", context_tokens=20, max_new_tokens=3))
    core.submit(SimRequest("long", context_tokens=20, max_new_tokens=500))

    def predicted() -> tuple[float, float]:
        text = recorder.render("m", core.now)
        values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        return values["llamacpp:tokens_predicted_total"], values["llamacpp:tokens_predicted_seconds_total"]

    while core.seqs.get("short") is not None:
        result = core.step()
        assert result is not None
        recorder.on_step(result)
    tokens, seconds = predicted()
    assert tokens == 3 and seconds > 0
    for _ in range(5):
        result = core.step()
        assert result is not None
        recorder.on_step(result)
    assert predicted()[0] == 3  # "long" is generating, but nothing is counted yet
    generated = core.seqs["long"].generated
    core.abort("long")
    assert predicted()[0] == 3 + generated  # a cancel adds what was generated


def test_llamacpp_throughput_gauges_reset_on_every_scrape() -> None:
    recorder = busy_recorder("llamacpp")

    def gauge(text: str, name: str) -> float:
        return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)

    while not recorder.predicted_done:  # llama-server counts a request's tokens when it ends
        result = recorder.core.step()
        assert result is not None
        recorder.on_step(result)
    first = recorder.render("ds-32b", 1.0)
    second = recorder.render("ds-32b", 1.0)
    assert gauge(first, "llamacpp:predicted_tokens_seconds") > 0
    assert gauge(second, "llamacpp:predicted_tokens_seconds") == 0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_numbers_follow_the_engine(dialect: str) -> None:
    recorder = busy_recorder(dialect)
    core = recorder.core
    values = {s.name: s.value for f in text_string_to_metric_families(recorder.render("m", core.now)) for s in f.samples}
    running = {"vllm-v1": "vllm:num_requests_running", "vllm-v0": "vllm:num_requests_running",
               "llamacpp": "llamacpp:requests_processing", "sglang": "sglang:num_running_reqs"}[dialect]
    assert values[running] == core.num_running > 0
    generated = {"vllm-v1": "vllm:generation_tokens_total", "vllm-v0": "vllm:generation_tokens_total",
                 "llamacpp": "llamacpp:tokens_predicted_total", "sglang": "sglang:generation_tokens_total"}[dialect]
    if dialect == "llamacpp":
        # only ended requests are counted; /slots n_decoded has the busy slots' tokens
        live = sum(seq.generated for seq in core.running)
        assert live > 0 and values[generated] + live == core.counters.generation_tokens
    else:
        assert values[generated] == core.counters.generation_tokens > 0
    if dialect.startswith("vllm"):
        assert values["vllm:gpu_cache_usage_perc"] == pytest.approx(core.kv_usage)
        assert 0 < core.kv_usage < 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_contradictory_override_is_valid_prometheus(dialect: str) -> None:
    recorder = busy_recorder(dialect)
    text = recorder.render("m", 1.0, Override())
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    running = {"vllm-v1": "vllm:num_requests_running", "vllm-v0": "vllm:num_requests_running",
               "llamacpp": "llamacpp:requests_processing", "sglang": "sglang:num_running_reqs"}[dialect]
    assert values[running] == -1
    usage = {"vllm-v1": "vllm:kv_cache_usage_perc", "vllm-v0": "vllm:gpu_cache_usage_perc",
             "sglang": "sglang:token_usage"}.get(dialect)
    if usage:
        assert values[usage] == 1.7
