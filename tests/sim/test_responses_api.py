"""/v1/responses against real simulator processes: vLLM's body and event stream, llama-server's, the engine's batch."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from sim import textgen
from sim.launch import EngineHandle

QUESTION = "Tell me about rivers, please."
EXTRA = {"ignore_eos": True}
VLLM_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added"]
VLLM_CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                "response.completed"]


def sse_events(raw: str) -> list[tuple[str, dict[str, object]]]:
    """``(event name, data)`` of every event; each must have exactly an ``event:`` and a ``data:`` line."""
    out = []
    for block in raw.split("\n\n"):
        if not block:
            continue
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        out.append((name[len("event: "):], json.loads(data[len("data: "):])))
    return out


def test_non_streamed_with_the_openai_client(client: openai.OpenAI) -> None:
    r = client.responses.create(model="ds-32b", input=QUESTION, max_output_tokens=7, extra_body=EXTRA)
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    assert r.model == "ds-32b" and r.max_output_tokens == 7
    assert textgen.count_tokens(r.output_text) == 7
    message = r.output[0]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert r.usage is not None and r.usage.output_tokens == 7
    assert r.usage.input_tokens == textgen.chat_tokens([QUESTION])
    assert r.usage.total_tokens == r.usage.input_tokens + 7


def test_the_answer_is_the_chat_answer_to_the_same_messages(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": QUESTION}]
    chat = client.chat.completions.create(model="ds-32b", messages=messages, max_tokens=6, seed=4,  # type: ignore[arg-type]
                                          extra_body=EXTRA)
    r = client.responses.create(model="ds-32b", instructions="be brief", input=QUESTION, max_output_tokens=6,
                                extra_body={**EXTRA, "seed": 4})
    assert r.output_text == chat.choices[0].message.content
    assert r.instructions == "be brief"
    items = client.responses.create(model="ds-32b", max_output_tokens=6, extra_body={**EXTRA, "seed": 4},
                                    input=[{"role": "system", "content": [{"type": "input_text", "text": "be brief"}]},
                                           {"role": "user", "content": QUESTION}])
    assert items.output_text == r.output_text


def test_streamed_with_the_openai_client(client: openai.OpenAI) -> None:
    full = client.responses.create(model="ds-32b", input=QUESTION, max_output_tokens=5, extra_body={**EXTRA, "seed": 2})
    events = list(client.responses.create(model="ds-32b", input=QUESTION, max_output_tokens=5, stream=True,
                                          extra_body={**EXTRA, "seed": 2}))
    assert [e.type for e in events] == VLLM_EVENTS + ["response.output_text.delta"] * 5 + VLLM_CLOSING
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == full.output_text
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == full.output_text and done.response.usage is not None
    assert done.response.usage.output_tokens == 5
    assert events[0].type == "response.created" and events[0].response.status == "in_progress"


def test_raw_stream_is_event_and_data_lines_without_done(engine: EngineHandle) -> None:
    body = {"model": "ds-32b", "input": QUESTION, "max_output_tokens": 3, "stream": True, **EXTRA}
    r = httpx.post(f"{engine.url}/v1/responses", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in r.text and r.text.endswith("\n\n")
    events = sse_events(r.text)
    assert all(name == data["type"] for name, data in events)
    delta = next(data for name, data in events if name == "response.output_text.delta")
    assert list(delta) == ["content_index", "delta", "item_id", "logprobs", "output_index", "sequence_number", "type"]
    completed = events[-1][1]["response"]
    assert isinstance(completed, dict) and completed["status"] == "completed" and completed["tools"] == []


def test_a_response_runs_in_the_engines_batch(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", speed=2.0)
    body = {"model": "ds-32b", "input": QUESTION, "max_output_tokens": 1000, "stream": True, **EXTRA}
    with httpx.stream("POST", f"{engine.url}/v1/responses", json=body, timeout=10) as r:
        lines = r.iter_lines()  # (leaving a for loop over it early would close the connection)
        deltas = 0
        while deltas < 3:
            deltas += next(lines) == "event: response.output_text.delta"
        stats = engine.stats()
        assert stats["running"] == 1 and stats["kv_usage"] > 0
        assert stats["prompt_tokens"] == textgen.chat_tokens([QUESTION])
    deadline = time.monotonic() + 60
    while engine.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.stats()["finished"] == {"abort": 1}  # the client left: aborted like a chat stream


@pytest.mark.parametrize("body,status,needle", [
    ({"input": "x", "model": "gpt-4"}, 404, "does not exist"),
    ({"input": "x", "previous_response_id": "resp_1"}, 404, "Response with id 'resp_1' not found."),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}]}, 400, "Tool use"),
    ({"input": "x", "background": True}, 400, "background"),
    ({"model": "ds-32b"}, 400, "input"),
    ({"input": "word " * 3000}, 400, "exceeds the max_model_len"),
])
def test_refusals_are_vllms(engine: EngineHandle, body: dict[str, object], status: int, needle: str) -> None:
    r = httpx.post(f"{engine.url}/v1/responses", json=body)
    assert r.status_code == status
    assert needle in r.json()["error"]["message"] and r.json()["error"]["code"] == status


def test_llamacpp_answers_in_llama_servers_shape(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect="llamacpp", speed=50.0)
    body = {"input": QUESTION, "max_output_tokens": 4, "seed": 9}
    full = httpx.post(f"{engine.url}/v1/responses", json=body).json()
    assert list(full) == ["completed_at", "created_at", "id", "model", "object", "output", "status", "usage"]
    assert full["usage"]["output_tokens"] == 4 and full["usage"]["input_tokens_details"] == {"cached_tokens": 0}
    text = full["output"][0]["content"][0]["text"]
    raw = httpx.post(f"{engine.url}/responses", json={**body, "stream": True}).text
    events = sse_events(raw)
    names = [name for name, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 4, *VLLM_CLOSING]
    assert all("sequence_number" not in data for _, data in events)
    assert "".join(str(data["delta"]) for name, data in events if name.endswith(".delta")) == text
    assert "timings" in events[-1][1] and "[DONE]" not in raw
    r = httpx.post(f"{engine.url}/v1/responses", json={"input": "x", "previous_response_id": "resp_1"})
    assert r.json() == {"error": {"code": 400, "message": "llama.cpp does not support 'previous_response_id'.",
                                  "type": "invalid_request_error"}}
