"""The official openai client against a real simulator process: formats, ids, text, usage, errors."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim import textgen
from sim.launch import EngineHandle, start_engine

MESSAGES = [{"role": "user", "content": "Tell me about rivers, please."}]


def test_chat_non_streaming(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=12,  # type: ignore[arg-type]
                                       extra_body={"ignore_eos": True})
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == "ds-32b"
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert choice.message.content and textgen.count_tokens(choice.message.content) == 12
    assert r.usage is not None
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens == textgen.chat_tokens([MESSAGES[0]["content"]])
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_chat_streaming_with_usage_matches_the_full_answer(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=15, seed=3,  # type: ignore[arg-type]
                                          extra_body={"ignore_eos": True})
    stream = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=15, seed=3,  # type: ignore[arg-type]
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 15
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
                                                 stream=True, extra_body={"ignore_eos": True}))
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completions_streaming_and_not(client: openai.OpenAI) -> None:
    full = client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=9, seed=1,
                                     extra_body={"ignore_eos": True})
    assert full.id.startswith("cmpl-") and full.object == "text_completion"
    assert full.choices[0].finish_reason == "length"
    assert full.usage is not None and full.usage.completion_tokens == 9
    assert full.usage.prompt_tokens == textgen.count_tokens("Once upon a time")
    chunks = list(client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=9, seed=1,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9


def test_answer_stops_by_itself_unless_ignore_eos(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=1500, seed=11)  # type: ignore[arg-type]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and 0 < r.usage.completion_tokens < 1500


def test_max_completion_tokens_wins_over_max_tokens(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_completion_tokens=3,  # type: ignore[arg-type]
                                       extra_body={"max_tokens": 9, "ignore_eos": True})
    assert r.usage is not None and r.usage.completion_tokens == 3


def test_a_stop_string_ends_the_answer_and_names_itself_in_stop_reason(client: openai.OpenAI) -> None:
    body: dict[str, object] = {"ignore_eos": True}
    free = client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=12, seed=5,
                                     extra_body=body).choices[0].text
    stop = " " + free.split()[5]
    cut = free[: free.index(stop)]
    r = client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=12, seed=5,
                                  stop=["zzz", stop], extra_body=body)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.text == cut
    assert (choice.model_extra or {})["stop_reason"] == stop
    # the token that completed the stop string counts
    assert r.usage is not None and r.usage.completion_tokens == textgen.count_tokens(free[: len(cut) + len(stop)])
    chunks = list(client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=12, seed=5,
                                            stop=["zzz", stop], stream=True, extra_body=body))
    assert "".join(c.choices[0].text for c in chunks) == cut
    assert len(chunks) == r.usage.completion_tokens  # one chunk per token, held-back text or not
    assert (chunks[-1].choices[0].model_extra or {})["stop_reason"] == stop


def test_a_stream_has_one_chunk_per_token_also_when_the_simulator_runs_behind(sim_engine) -> None:  # type: ignore[no-untyped-def]
    # the null profile's steps take next to no time: tokens come faster than chunks are written
    engine = sim_engine("null", speed=50.0)
    body = {"model": "ds-32b", "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True}
    raw = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=30).text
    chunks = [json.loads(line[len("data: "):]) for line in raw.splitlines() if line.startswith("data: {")]
    assert [textgen.count_tokens(c["choices"][0]["text"]) for c in chunks] == [1] * 400


def test_models_health_version(client: openai.OpenAI, engine: EngineHandle) -> None:
    assert [m.id for m in client.models.list()] == ["ds-32b"]
    assert httpx.get(f"{engine.url}/health").status_code == 200
    assert "version" in httpx.get(f"{engine.url}/version").json()


def test_unknown_model_is_404_like_vllm(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4", messages=MESSAGES)  # type: ignore[arg-type]
    body = info.value.body
    assert isinstance(body, dict)
    assert "does not exist" in body["message"] and body["code"] == 404 and body["type"] == "NotFoundError"


@pytest.mark.parametrize(
    "payload,needle",
    [
        ({"model": "ds-32b"}, "messages"),
        ({"model": "ds-32b", "messages": MESSAGES, "max_tokens": 0}, "at least 1"),
        ({"model": "ds-32b", "messages": MESSAGES, "max_tokens": 100000}, "maximum context length"),
        ({"model": "ds-32b", "messages": MESSAGES, "stream_options": {"include_usage": True}}, "stream=True"),
        ({"model": "ds-32b", "messages": MESSAGES, "stop": ["end", ""]}, "empty string"),
    ],
)
def test_bad_input_gets_vllm_error_shape(engine: EngineHandle, payload: dict[str, object], needle: str) -> None:
    r = httpx.post(f"{engine.url}/v1/chat/completions", json=payload)
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert needle in error["message"]


def test_not_json_is_400(engine: EngineHandle) -> None:
    r = httpx.post(f"{engine.url}/v1/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()


def _stats(engine: EngineHandle) -> dict[str, object]:
    return httpx.get(f"{engine.url}/sim/stats").json()  # type: ignore[no-any-return]


def _wait_idle(engine: EngineHandle, timeout: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    stats = _stats(engine)
    while time.monotonic() < deadline and (stats["running"] or stats["waiting"] or stats["kv_usage"]):
        time.sleep(0.02)
        stats = _stats(engine)
    return stats


def test_client_disconnect_aborts_and_frees_kv() -> None:
    with start_engine("tiny", speed=2.0) as (_, engine):
        body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 1500, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body, timeout=10) as r:
            lines = r.iter_lines()  # (leaving this iterator early would close the connection)
            got = [line for line in (next(lines) for _ in range(6)) if line.startswith("data:")]
            assert len(got) == 3
            assert _stats(engine)["running"] == 1
        stats = _wait_idle(engine)
        assert stats["running"] == 0 and stats["kv_usage"] == 0
        assert stats["finished"] == {"abort": 1}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{engine.url}/v1/chat/completions", timeout=0.3,
                       json={"model": "ds-32b", "messages": MESSAGES, "max_tokens": 1500, "ignore_eos": True})
        stats = _wait_idle(engine)
        assert stats["running"] == 0 and stats["kv_usage"] == 0
        assert stats["finished"] == {"abort": 2}


@pytest.mark.parametrize("dialect", ["vllm-v0", "sglang", "llamacpp"])
def test_other_dialects_serve_the_api_and_their_metrics(sim_engine, dialect: str) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect=dialect, speed=50.0, parallel=3)
    with openai.OpenAI(base_url=f"{engine.url}/v1", api_key="none", max_retries=0) as client:
        r = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=5,  # type: ignore[arg-type]
                                           extra_body={"ignore_eos": True})
        assert r.usage is not None and r.usage.completion_tokens == 5
    families = {f.name for f in text_string_to_metric_families(httpx.get(f"{engine.url}/metrics").text)}
    prefix = {"vllm-v0": "vllm:", "sglang": "sglang:", "llamacpp": "llamacpp:"}[dialect]
    assert families and all(name.startswith(prefix) for name in families)
    if dialect == "llamacpp":
        assert httpx.get(f"{engine.url}/health").json() == {"status": "ok"}
        slots = httpx.get(f"{engine.url}/slots").json()
        assert [s["id"] for s in slots] == [0, 1, 2]
        assert all(not s["is_processing"] for s in slots)
    else:
        r2 = httpx.post(f"{engine.url}/v1/chat/completions", json={"model": "ds-32b"})
        assert r2.status_code == 400
        assert r2.json()["object"] == "error"  # vLLM <= 0.10.0 and SGLang shape
    assert json.loads(httpx.get(f"{engine.url}/sim/stats").text)["dialect"] == dialect
