"""The daemon's record of its traffic: every finished request, its decision and inputs, what
happened; over the control socket and in a rotating file; never prompt text."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

from syshaxd.schema import RequestRecordModel
from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

SECRET = "zebra-7731-unlikely-words"


def _records(stack: Stack, limit: int | None = None) -> list[RequestRecordModel]:
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        answer = control.get("/v1/requests", params={} if limit is None else {"limit": limit})
    answer.raise_for_status()
    return [RequestRecordModel.model_validate(item) for item in answer.json()]


def test_finished_requests_are_kept_with_their_decision_inputs_and_outcome(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", config={"logging": {"requests_kept": 5}})
    client = stack.openai()
    client.chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": SECRET}], max_tokens=7,
                                   extra_body={"ignore_eos": True})
    with client.chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                        stream=True, extra_body={"ignore_eos": True}) as stream:
        for _ in stream:
            pass
    assert wait_until(lambda: len(_records(stack)) == 2)
    whole, streamed = _records(stack)
    assert (whole.stream, streamed.stream) == (False, True)
    assert whole.outcome == streamed.outcome == "ok"
    assert (whole.output_tokens, whole.output_tokens_source) == (7, "usage")
    assert (streamed.output_tokens, streamed.output_tokens_source) == (5, "usage")  # asked of the engine by syshaxd
    assert whole.max_tokens == 7 and whole.prompt_tokens > 0
    assert whole.decision is not None and whole.decision.policy == "classic" and whole.decision.outcome == "ok"
    assert whole.decision.engine in {view.name for view in whole.inputs}
    assert {view.device for view in whole.inputs} == {"gpu", "cpu"} and all(v.state == "up" for v in whole.inputs)
    assert whole.limits["cpu_max_batch_size"] == 20 and "tpot_target" in whole.limits
    assert whole.ttft is not None and whole.e2e >= whole.ttft
    assert whole.tpot is None  # a whole answer's tokens reached the client at once
    assert streamed.ttft is not None and streamed.tpot is not None
    assert whole.queued is not None and 0 <= whole.queued <= whole.e2e
    assert whole.arrival <= streamed.arrival
    assert SECRET not in json.dumps([r.model_dump() for r in _records(stack)])
    # Bounded: the ring keeps the last logging.requests_kept; limit= trims further.
    for _ in range(6):
        client.chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert wait_until(lambda: len(_records(stack)) == 5)
    assert len(_records(stack, limit=2)) == 2
    assert whole.request_id not in {r.request_id for r in _records(stack)}


def test_records_go_to_a_rotating_file_and_never_hold_prompt_text(
        make_stacks: Callable[[str], Callable[..., Stack]]) -> None:
    with tempfile.TemporaryDirectory(prefix="syshax-records-") as where:
        file = Path(where) / "requests.jsonl"
        stack = make_stacks("r")(policy="gpu-only", config={"logging": {
            "requests_file": str(file), "requests_file_bytes": 4096, "requests_file_backups": 2}})
        client = stack.openai()
        for _ in range(30):
            client.chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": SECRET}], max_tokens=2)
        assert wait_until(lambda: len(_records(stack)) == 30)
        files = sorted(Path(where).glob("requests.jsonl*"))
        assert [f.name for f in files] == ["requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
        lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
        assert all(f.stat().st_size <= 4096 + 2048 for f in files)
        assert {line["outcome"] for line in lines} == {"ok"} and len(lines) < 30  # the oldest rotated away
        assert all(RequestRecordModel.model_validate(line).decision is not None for line in lines)
        assert SECRET not in "".join(f.read_text() for f in files)


def test_the_daemon_keeps_the_latest_advice_for_the_console(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only")
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        none = control.get("/v1/advice")
        assert none.status_code == 404 and "syshax advise" in none.json()["error"]
        advice = {"made_at": 1.0, "requests": 40, "window_s": 60.0, "summary": "keep it",
                  "options": [{"label": "gpu-only", "goodput": 0.5, "throughput": 0.6, "current": True}],
                  "recommended": 0}
        assert control.post("/v1/advice", json=advice).status_code == 200
        kept = control.get("/v1/advice").json()
        assert kept["options"][0]["label"] == "gpu-only" and kept["recommended"] == 0
        bad = control.post("/v1/advice", json={**advice, "options": [{"label": "x"}]})
        assert bad.status_code == 422 and bad.json()["key"].startswith("options.0")
        assert control.get("/v1/advice").json()["summary"] == "keep it"  # unchanged
