"""A sheddable request placed on the GPU gives up its slot before its first token when an
interactive request would be refused for want of room: through a real daemon in front of
simulated engines, as the official openai client sees it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
EXACT = {"ignore_eos": True, "seed": 11}
SHEDDABLE = {"x-syshax-class": "sheddable"}


@dataclass
class Call:
    """One streamed request through the openai client, in a thread: what it got, or its error."""

    name: str
    headers: dict[str, str] = field(default_factory=dict)
    max_tokens: int = 4
    text: str = ""
    status: int | None = None
    error: openai.APIStatusError | None = None
    thread: threading.Thread | None = None

    def start(self, client: openai.OpenAI) -> Call:
        self.thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self.thread.start()
        return self

    def _run(self, client: openai.OpenAI) -> None:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="ds-32b", messages=MESSAGES, max_tokens=self.max_tokens, stream=True, extra_body=EXACT,
                extra_headers={**self.headers, "x-request-id": self.name})
            self.status = raw.status_code
            for chunk in raw.parse():
                for choice in chunk.choices:
                    self.text += choice.delta.content or ""
        except openai.APIStatusError as exc:
            self.status, self.error = exc.status_code, exc

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(60)
        assert not self.thread.is_alive(), f"{self.name} never ended"


def _aborted(stack: Stack) -> float:
    """Requests the GPU engine ended as aborted (its client, the daemon, closed the connection)."""
    text = httpx.get(f"{stack.gpu_url}/metrics", timeout=5).text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "vllm:request_success_total" and sample.labels.get("finished_reason") == "abort")


def _record(stack: Stack, request_id: str) -> dict[str, Any]:
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshax", timeout=10) as control:
        return next(r for r in control.get("/v1/requests").json() if r["request_id"] == request_id)


def _saturable(make_stack: Callable[..., Stack], speed: float = 20.0) -> Stack:
    """Two GPU slots, no CPU room, one place in line."""
    return make_stack(policy="classic", speed=speed, config={
        "decider": {"gpu_max_batch_size": 2, "cpu_max_batch_size": 0}, "system": {"max_queue_size": 1}})


@pytest.fixture
def stack(make_stack: Callable[..., Stack]) -> Iterator[Stack]:
    stack = _saturable(make_stack)
    try:
        yield stack
    finally:
        stack.faults(stack.gpu_url, paused=False)


@pytest.mark.parametrize("idle", [0, 2], ids=["sent-after-a-connection-is-had", "sent-on-an-idle-connection"])
def test_an_interactive_request_takes_the_gpu_slot_of_a_sheddable_one_before_its_first_token(
        stack: Stack, idle: int) -> None:
    client = stack.openai(timeout=60)
    # With idle connections to the GPU engine a request is sent from the admission's own call
    # (no task); without, from the task that waits for a connection: both must be taken back.
    warm = [Call(f"warm{i}").start(client) for i in range(idle)]
    for call in warm:
        call.join()
        assert call.status == 200
    gpu = stack.metric("syshax_decisions_total", device="gpu")
    stack.faults(stack.gpu_url, paused=True)  # what is placed there has no first token until let go
    calls: list[Call] = []
    try:
        calls += [Call("shed-old", SHEDDABLE).start(client)]
        assert wait_until(lambda: stack.metric("syshax_decisions_total", device="gpu") == gpu + 1)
        calls += [Call("shed-new", SHEDDABLE).start(client)]
        assert wait_until(lambda: stack.metric("syshax_decisions_total", device="gpu") == gpu + 2)
        calls += [Call("chat-waits").start(client)]
        assert wait_until(lambda: stack.metric("syshax_queue_depth") == 1)
        assert stack.metric("syshax_class_refusals_total") == 0
        calls += [Call("chat-newcomer").start(client)]  # the line is full: a sheddable request gives up its slot
        calls[1].join()
        assert wait_until(lambda: stack.metric("syshax_decisions_total", device="gpu") == gpu + 3)  # the head took it
        assert stack.metric("syshax_queue_depth") == 1  # and the newcomer waits in its place
        assert wait_until(lambda: _aborted(stack) == 1)  # the engine was told to stop it
    finally:
        stack.faults(stack.gpu_url, paused=False)
        for call in calls:
            call.join()
    shed_old, shed_new, waits, newcomer = calls
    assert shed_new.status == 429 and isinstance(shed_new.error, openai.RateLimitError)
    assert shed_new.error.response.headers["x-syshax-refused-reason"] == "shed"
    assert shed_new.error.response.headers["x-syshax-class"] == "sheddable"
    assert shed_new.error.response.headers["retry-after"] == "1"
    error = shed_new.error.response.json()["error"]  # the OpenAI error shape
    assert "gave up its GPU slot to a more important request" in error["message"] and error["type"]
    assert [(c.status, len(c.text) > 0) for c in (shed_old, waits, newcomer)] == [(200, True)] * 3
    assert stack.metric("syshax_class_refusals_total", **{"class": "sheddable"}, reason="shed") == 1
    assert stack.metric("syshax_class_refusals_total", **{"class": "interactive"}) == 0
    record = _record(stack, "shed-new")
    assert (record["outcome"], record["refused"], record["service_class"]) == ("rejected", "shed", "sheddable")
    assert record["decision"]["engine"] == "gpu0" and record["ttft"] is None
    assert "request shed-new (class sheddable) gave up its slot on gpu0 before its first byte" in stack.log_text()
    # The daemon keeps serving, and what follows runs where there is room.
    after = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2, extra_body=EXACT)
    assert after.choices[0].finish_reason == "length"


def test_a_sheddable_request_that_has_its_first_token_keeps_its_slot(make_stack: Callable[..., Stack]) -> None:
    stack = _saturable(make_stack, speed=1.0)  # 300 tokens take seconds: it is still decoding when paused
    client = stack.openai(timeout=60)
    calls: list[Call] = []
    try:
        calls += [Call("shed-streaming", SHEDDABLE, max_tokens=300).start(client)]
        assert wait_until(lambda: calls[0].text != "")  # its client has its first token
        stack.faults(stack.gpu_url, paused=True)
        calls += [Call("chat-running").start(client)]
        assert wait_until(lambda: stack.metric("syshax_decisions_total", device="gpu") == 2)
        calls += [Call("chat-waits").start(client)]
        assert wait_until(lambda: stack.metric("syshax_queue_depth") == 1)
        calls += [Call("chat-refused").start(client)]
        calls[3].join()
    finally:
        stack.faults(stack.gpu_url, paused=False)
        for call in calls:
            call.join()
    assert [c.status for c in calls] == [200, 200, 200, 429]
    assert calls[3].error is not None
    assert calls[3].error.response.headers["x-syshax-refused-reason"] == "queue_full"
    assert stack.metric("syshax_class_refusals_total", **{"class": "sheddable"}) == 0
