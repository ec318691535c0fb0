"""Property-based fuzzing of the engine metrics parsers: no exception but MetricsParseError escapes,
and whatever is parsed is sane (no negative counts, no usage above 1, no infinite rates).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syshaxd.engines import DIALECTS, MetricsParseError, RateTracker
from syshaxd.engines.llamacpp import read_slots
from syshaxd.snapshot import EngineMetrics, HistogramData
from tests.shared import shared

#: Bounded so the whole module runs in a few seconds on a busy 2-core machine.
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = [
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc",
    "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_success_total", "vllm:avg_prompt_throughput_toks_per_s",
    "vllm:avg_generation_throughput_toks_per_s", "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_sum",
    "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
    "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total", "llamacpp:prompt_tokens_total", "llamacpp:kv_cache_usage_ratio",
    "sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
    "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
    "sglang:time_to_first_token_seconds_bucket", "process_cpu_seconds_total", "foo_created",
]
LABELS = ["engine", "model_name", "tp_rank", "pp_rank", "dp_rank", "le", "finished_reason"]
SPECIAL = ["NaN", "+Inf", "-Inf", "-0", "1e308", "-1e308", "0x10", "1_000", "", "nan", "Inf"]

values = st.one_of(
    st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    st.floats(allow_nan=False),  # any magnitude: sums of huge series must not overflow
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1.0, 1.5, 2.0, 1.7976931348623157e308]),
)
label_values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    """One well-formed sample line, maybe preceded by TYPE/HELP, with odd labels and values."""
    name = draw(st.sampled_from(NAMES))
    labels = draw(st.dictionaries(st.sampled_from(LABELS), label_values, max_size=3))
    if name.endswith("_bucket") and draw(st.booleans()):
        labels["le"] = draw(st.sampled_from(["0.1", "1", "+Inf", "NaN", "abc", "-5"]))
    value = draw(values)
    rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    line = f"{name}{{{rendered}}} {_number(value)}" if labels else f"{name} {_number(value)}"
    if draw(st.booleans()):
        line += f" {draw(st.integers(min_value=0, max_value=2**40))}"
    head = ""
    if draw(st.integers(0, 3)) == 0:
        family = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        kind = draw(st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "garbage"]))
        head = f"# HELP {family} fuzz\n# TYPE {family} {kind}\n"
    return head + line


def assert_sane(m: EngineMetrics) -> None:
    """What every dialect promises about a parsed record, whatever the engine sent."""
    for usage in (m.kv_cache_usage, m.cpu_swap_usage):
        assert usage is None or 0.0 <= usage <= 1.0, usage
    for n in (m.running, m.waiting, m.swapped):
        assert n is None or (isinstance(n, int) and n >= 0), n
    for total in (m.preemptions_total, m.prompt_tokens_total, m.generation_tokens_total,
                  m.requests_finished_total, m.prefill_tps, m.decode_tps):
        assert total is None or (math.isfinite(total) and total >= 0), total
    for _, hist in m.histograms:
        assert isinstance(hist, HistogramData)
        hist.quantile(0.5)
        hist.quantile(0.99)


def parse_or_reject(dialect: str, text: str) -> EngineMetrics | None:
    """Parse with one dialect; MetricsParseError (the documented failure) gives None."""
    try:
        return DIALECTS[dialect].parse(text)
    except MetricsParseError as exc:
        assert str(exc), "a parse error must say what was wrong"
        return None


@FUZZ
@given(text=st.text(max_size=400), dialect=st.sampled_from(sorted(DIALECTS)))
def test_arbitrary_text_parses_or_raises_the_parse_error(text: str, dialect: str) -> None:
    m = parse_or_reject(dialect, text)
    if m is not None:
        assert_sane(m)


@FUZZ
@given(lines=st.lists(sample_lines(), max_size=25), dialect=st.sampled_from(sorted(DIALECTS)))
def test_wellformed_text_with_lying_values_gives_a_sane_record(lines: list[str], dialect: str) -> None:
    text = "\n".join(lines) + "\n"
    m = parse_or_reject(dialect, text)
    if m is not None:
        assert_sane(m)


@FUZZ
@given(lines=st.lists(sample_lines(), min_size=1, max_size=10), noise=st.text(max_size=30),
       where=st.integers(min_value=0, max_value=2000))
def test_wellformed_text_with_noise_spliced_in(lines: list[str], noise: str, where: int) -> None:
    text = "\n".join(lines) + "\n"
    cut = where % (len(text) + 1)
    mangled = text[:cut] + noise + text[cut:]
    for dialect in DIALECTS:
        m = parse_or_reject(dialect, mangled)
        if m is not None:
            assert_sane(m)


@pytest.fixture(scope="module")
def captures() -> list[Path]:
    """The real /metrics captures (resolved once, outside hypothesis: a missing one fails plainly)."""
    found = sorted(p for p in shared("fixtures", "metrics").iterdir() if p.suffix == ".prom")
    assert found, "no .prom capture in the shared fixtures"
    return found


@FUZZ
@given(data=st.data())
def test_real_captures_cut_and_spliced(captures: list[Path], data: st.DataObject) -> None:
    capture = data.draw(st.sampled_from(captures)).read_text(encoding="utf-8")
    start = data.draw(st.integers(min_value=0, max_value=len(capture)))
    end = data.draw(st.integers(min_value=start, max_value=len(capture)))
    junk = data.draw(st.text(max_size=20) | st.sampled_from(SPECIAL))
    mangled = capture[:start] + junk + capture[end:]
    for dialect in DIALECTS:
        m = parse_or_reject(dialect, mangled)
        if m is not None:
            assert_sane(m)


slot = st.fixed_dictionaries(
    {},
    optional={
        "id": st.integers(-2, 8),
        "n_ctx": st.one_of(st.integers(-5, 10_000), st.floats(allow_nan=True), st.none(), st.text(max_size=3)),
        "n_past": st.one_of(st.integers(-10_000, 20_000), st.booleans(), st.none()),
        "n_prompt_tokens": st.one_of(st.integers(-10_000, 20_000), st.floats(allow_nan=True), st.text(max_size=3)),
        "is_processing": st.one_of(st.booleans(), st.integers(-1, 2), st.none(), st.text(max_size=3)),
        "state": st.one_of(st.integers(-1, 3), st.none()),
        "next_token": st.one_of(
            st.none(),
            st.lists(st.dictionaries(st.sampled_from(["n_decoded", "has_next_token"]),
                                     st.integers(-100, 100_000) | st.text(max_size=3), max_size=2), max_size=2),
            st.dictionaries(st.just("n_decoded"), st.integers(-100, 100_000) | st.floats(), max_size=1),
        ),
    },
)


def _slots_or_reject(text: str) -> None:
    try:
        usage = read_slots(text).kv_cache_usage
    except MetricsParseError as exc:
        assert str(exc)
        return
    assert usage is None or 0.0 <= usage <= 1.0, usage


@FUZZ
@given(slots=st.lists(slot, max_size=6) | st.recursive(st.none() | st.integers() | st.text(max_size=4),
                                                         lambda inner: st.lists(inner, max_size=3), max_leaves=8))
def test_slots_json_of_any_shape_gives_a_fraction_or_the_parse_error(slots: object) -> None:
    _slots_or_reject(json.dumps(slots))


@FUZZ
@given(text=st.text(max_size=200))
def test_slots_arbitrary_text(text: str) -> None:
    _slots_or_reject(text)


def test_slots_deeply_nested_json_is_a_parse_error() -> None:
    with pytest.raises(MetricsParseError):
        read_slots("[" * 100_000 + "]" * 100_000)


counter_values = st.one_of(st.none(), st.floats(min_value=0, max_value=1e12))


@st.composite
def scrape(draw: st.DrawFn) -> tuple[float, EngineMetrics]:
    """A scrape time step (may go backwards or stand still) and a record of counters."""
    step = draw(st.sampled_from([0.0, -0.5, 0.001, 0.2, 1.0, 7.0]))
    hist = None
    if draw(st.booleans()):
        count, total = draw(st.floats(0, 1e9)), draw(st.floats(0, 1e9) | st.just(math.nan))
        hist = HistogramData(((math.inf, count),), count, total)
    record = EngineMetrics(
        prompt_tokens_total=draw(counter_values),
        generation_tokens_total=draw(counter_values),
        requests_finished_total=draw(counter_values),
        histograms=(("tpot", hist), ("ttft", hist)) if hist else (),
    )
    return step, record


@FUZZ
@given(scrapes=st.lists(scrape(), min_size=1, max_size=20))
def test_rates_from_resetting_and_stalling_counters_are_finite_and_not_negative(
    scrapes: list[tuple[float, EngineMetrics]],
) -> None:
    tracker = RateTracker(window=5.0)
    now = 1000.0
    for step, record in scrapes:
        now += step
        out = tracker.update(record, now)
        for rate in (out.prefill_tps, out.decode_tps, out.finish_rate, out.tpot_recent, out.ttft_recent):
            assert rate is None or (math.isfinite(rate) and rate >= 0), rate


@pytest.mark.parametrize("dialect", ["vllm-v1", "vllm-v0", "sglang", "llamacpp"])
def test_series_near_float_max_do_not_overflow_the_sum(dialect: str) -> None:
    names = {"vllm-v1": "vllm:num_requests_running", "vllm-v0": "vllm:num_requests_running",
             "sglang": "sglang:num_running_reqs", "llamacpp": "llamacpp:requests_processing"}
    name = names[dialect]
    text = f'{name}{{engine="0",dp_rank="0"}} 1e308\n{name}{{engine="1",dp_rank="1"}} 1e308\n'
    m = parse_or_reject(dialect, text)
    assert m is not None and m.running is None  # an overflowing count is nonsense, not a number
