"""The demo's request mix: parsing both trace formats, the packaged sample, and the replay schedule."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from demo import llama
from demo import workload as wl
from demo.load import CHAT_OVERHEAD, prompt_text, request_body
from sim.textgen import chat_tokens

ROOT = Path(__file__).resolve().parents[2]

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,9000,7000
"""


def test_azure_format_becomes_offsets_from_the_first_request() -> None:
    trace = wl.parse_trace(AZURE.splitlines(), "t.csv")
    assert [r.prompt_tokens for r in trace.rows] == [374, 396, 9000]
    assert trace.rows[0].offset == 0.0
    assert trace.rows[1].offset == pytest.approx(4.314579, abs=1e-6)
    assert trace.rate == pytest.approx(2 / trace.span)


def test_packaged_sample_loads_and_says_where_it_came_from() -> None:
    trace = wl.load_sample()
    assert len(trace.rows) == wl.SAMPLE_ROWS
    assert "sample" in trace.source
    text = (Path(wl.__file__).with_name(wl.SAMPLE_NAME)).read_text(encoding="utf-8")
    assert "CC-BY 4.0" in text and "Splitwise" in text
    # Real requests: varied lengths and a realistic rate, not a constant synthetic stream.
    assert len({r.prompt_tokens for r in trace.rows}) > 100
    assert 1.0 < trace.rate < 20.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c\n1,2,3\n", "unknown columns"),
        ("offset_s,prompt_tokens,output_tokens\n0,12\n", ":2: not a request row"),
        ("offset_s,prompt_tokens,output_tokens\n0,1,x\n", ":2: not a request row"),
        ("offset_s,prompt_tokens,output_tokens\n0,-1,3\n", "negative"),
        ("offset_s,prompt_tokens,output_tokens\n5,1,1\n1,1,1\n", "not in time order"),
        ("# only a comment\n", "no requests"),
        ("offset_s,prompt_tokens,output_tokens\n", "no requests"),
    ],
)
def test_bad_trace_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(wl.TraceError, match=message):
        wl.parse_trace(text.splitlines(), "bad.csv")


def test_choose_trace_reads_a_path_and_reports_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(AZURE, encoding="utf-8")
    assert wl.choose_trace(str(path)).source == str(path)
    with pytest.raises(wl.TraceError, match="cannot read"):
        wl.choose_trace(str(tmp_path / "missing.csv"))


def test_real_trace_is_found_beside_a_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "main"
    checkout.mkdir()
    assert wl.find_real_trace(checkout) is None
    real = tmp_path / "shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
    real.parent.mkdir(parents=True)
    real.write_text(AZURE, encoding="utf-8")
    assert wl.find_real_trace(checkout) == real.resolve()


def test_the_checkout_the_package_runs_from_is_searched() -> None:
    # demo/ sits at the top of the checkout: tools/ is inside it, the full trace beside it.
    assert llama.BUILD_SCRIPT == ROOT / "tools" / "build_engines.py" and llama.BUILD_SCRIPT.is_file()
    assert wl.find_real_trace() == wl.find_real_trace(ROOT)


def test_schedule_scales_time_by_load_and_speed_and_repeats() -> None:
    trace = wl.parse_trace(["offset_s,prompt_tokens,output_tokens", "0,10,5", "2,20,6", "4,30,7"], "t")
    plan = list(itertools.islice(wl.schedule(trace, load=0.5, speed=4.0), 7))
    assert [p.at for p in plan[:3]] == [0.0, 1.0, 2.0]  # 2 s of trace at 0.5 x 4 = 1 s wall
    assert [p.index for p in plan] == list(range(7))
    # Second pass starts one mean gap after the first ends, in order.
    assert plan[3].at == pytest.approx(3.0) and plan[3].prompt_tokens == 10
    assert all(b.at > a.at for a, b in itertools.pairwise(plan))


def test_lengths_fit_the_context() -> None:
    prompt, output = wl.fit_lengths(9000, 7000)
    assert prompt + output <= wl.CONTEXT_LIMIT
    assert output == wl.CONTEXT_LIMIT // 2
    assert wl.fit_lengths(100, 50) == (100, 50)


def test_make_sample_keeps_a_window_of_consecutive_requests(tmp_path: Path) -> None:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{m:02d}:{s:02d}.5000000,{100 + (m * 60 + s) % 900},{10 + s}" for m in range(10) for s in range(60)]
    source = tmp_path / "azure.csv"
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "mix.csv"
    assert wl.main(["make-sample", str(source), "-o", str(out)]) == 0
    sample = wl.load_trace(out)
    assert len(sample.rows) == wl.SAMPLE_ROWS
    gaps = {round(b.offset - a.offset, 6) for a, b in itertools.pairwise(sample.rows)}
    assert gaps == {1.0}  # consecutive seconds of the source, not a random draw


def test_prompt_has_the_planned_token_count_for_the_simulator() -> None:
    for index, tokens in [(0, 7), (3, 100), (17, 2723)]:
        assert chat_tokens([prompt_text(index, tokens)]) == max(tokens, CHAT_OVERHEAD + 1)
    assert prompt_text(1, 50) != prompt_text(2, 50)
    body = request_body(wl.Planned(4, 0.0, 64, 33), "ds-32b")
    assert body["max_tokens"] == 33 and body["ignore_eos"] is True and body["model"] == "ds-32b"


def test_rotated_trace_starts_at_the_window_and_wraps_in_order() -> None:
    trace = wl.parse_trace(["offset_s,prompt_tokens,output_tokens", "0,1,1", "1,2,1", "2,3,1", "3,4,1"], "t")
    turned = wl.rotated(trace, 2)
    assert [r.prompt_tokens for r in turned.rows] == [3, 4, 1, 2]
    assert [r.offset for r in turned.rows] == [0.0, 1.0, 2.0, 3.0]
    assert "from request 3" in turned.source
    assert wl.rotated(trace, 0) is trace
