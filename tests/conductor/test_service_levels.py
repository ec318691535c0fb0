"""Service levels through a real daemon: a request names its class and targets, the answer says
where it ran and why, bad asks get a 400 naming the field, the box sheds what may be shed first,
and waiting work of a lower class still runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
EXACT = {"ignore_eos": True, "seed": 11}
STORY = ("x-syshax-class", "x-syshax-device", "x-syshax-engine", "x-syshax-mode", "x-syshax-reason")
BATCH_SLO = {"x-slo-ttft-ms": "60000", "x-slo-tpot-ms": "1000"}


def _records(stack: Stack) -> list[dict[str, Any]]:
    """The daemon's request records, from its control socket."""
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshax", timeout=10) as control:
        return list(control.get("/v1/requests").json())


def _post(stack: Stack, results: list[httpx.Response], headers: dict[str, str] | None = None,
          max_tokens: int = 3) -> None:
    results.append(httpx.post(f"{stack.url}/v1/chat/completions", headers=headers or {},
                              json={"messages": MESSAGES, "max_tokens": max_tokens, **EXACT}, timeout=60))


@pytest.fixture(scope="module")
def stack(make_module_stack: Callable[..., Stack]) -> Stack:
    return make_module_stack(policy="gpu-only")


def test_the_openai_client_reads_where_its_answer_ran(stack: Stack) -> None:
    client = stack.openai()
    raw = client.chat.completions.with_raw_response.create(
        model="ds-32b", messages=MESSAGES, max_tokens=3, extra_body=EXACT, extra_headers={"x-syshax-class": "batch"})
    assert raw.parse().choices[0].finish_reason == "length"
    assert [raw.headers.get(name) for name in STORY[:4]] == ["batch", "gpu", "gpu0", "whole"]
    assert raw.headers["x-syshax-reason"]
    streamed = client.chat.completions.with_raw_response.create(
        model="ds-32b", messages=MESSAGES, max_tokens=3, stream=True, extra_body=EXACT)
    assert [streamed.headers.get(name) for name in STORY[:4]] == ["interactive", "gpu", "gpu0", "whole"]
    assert sum(1 for _ in streamed.parse()) >= 3
    record = _records(stack)[-2]
    assert record["request_id"] == raw.headers["x-request-id"]
    assert (record["service_class"], record["ttft_target"], record["tpot_target"]) == ("batch", 60.0, 1.0)
    assert record["met"] is True and record["gpu_seconds"] > 0 and record["cpu_core_seconds"] == 0
    assert stack.metric("syshax_class_goodput_total", **{"class": "batch"}) >= 1
    assert stack.metric("syshax_class_requests_total", **{"class": "interactive"}, outcome="ok") >= 1


def test_slo_headers_and_a_body_priority_override_the_class(stack: Stack) -> None:
    answer = httpx.post(f"{stack.url}/v1/completions", headers={"x-slo-ttft-ms": "2500", "x-slo-tpot-ms": "40.5"},
                        json={"prompt": "the stone", "max_tokens": 2, "priority": -3, **EXACT}, timeout=30)
    assert answer.status_code == 200, answer.text
    record = next(r for r in _records(stack) if r["request_id"] == answer.headers["x-request-id"])
    assert (record["service_class"], record["ttft_target"], record["tpot_target"]) == ("interactive", 2.5, 0.0405)


@pytest.mark.parametrize(("headers", "body", "param", "says"), [
    ({"x-syshax-class": "gold"}, {}, "x-syshax-class", "the classes are batch, interactive, sheddable"),
    ({"x-syshax-class": "gold class"}, {}, "x-syshax-class", "not a class name"),
    ({"x-slo-ttft-ms": "-5"}, {}, "x-slo-ttft-ms", "positive number of milliseconds"),
    ({"x-slo-tpot-ms": "soon"}, {}, "x-slo-tpot-ms", "positive number of milliseconds"),
    ({"x-slo-ttft-ms": "0"}, {}, "x-slo-ttft-ms", "positive number of milliseconds"),
    ({}, {"priority": "high"}, "priority", "must be an integer"),
    ({}, {"priority": 1.5}, "priority", "must be an integer"),
    ({}, {"priority": 10**6}, "priority", "from -1000 to 1000"),
])
def test_a_bad_ask_is_a_400_naming_the_field(stack: Stack, headers: dict[str, str], body: dict[str, Any],
                                             param: str, says: str) -> None:
    answer = httpx.post(f"{stack.url}/v1/chat/completions", headers=headers,
                        json={"messages": MESSAGES, "max_tokens": 2, **body}, timeout=30)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and says in error["message"]
    assert httpx.get(f"{stack.url}/health", timeout=10).status_code == 200  # still serving


def test_work_that_can_wait_runs_on_the_cpu_when_the_gpu_is_full(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="adaptive", config={"decider": {"gpu_max_batch_size": 1}})
    stack.faults(stack.gpu_url, paused=True)  # one interactive request holds the GPU's one slot
    held: list[httpx.Response] = []
    first = threading.Thread(target=_post, args=(stack, held, None, 20))
    try:
        first.start()
        assert wait_until(lambda: stack.metric("syshax_decisions_total", device="gpu") == 1)
        batch = httpx.post(f"{stack.url}/v1/chat/completions", headers=BATCH_SLO,
                           json={"messages": MESSAGES, "max_tokens": 4, **EXACT}, timeout=60)
    finally:
        stack.faults(stack.gpu_url, paused=False)
        first.join(60)
    assert batch.status_code == 200, batch.text
    assert batch.headers["x-syshax-device"] == "cpu" and batch.headers["x-syshax-engine"] == "cpu0"
    assert held[0].status_code == 200 and held[0].headers["x-syshax-device"] == "gpu"
    record = next(r for r in _records(stack) if r["request_id"] == batch.headers["x-request-id"])
    assert record["cpu_core_seconds"] > 0 and record["gpu_seconds"] == 0


def test_a_saturated_box_sheds_sheddable_work_before_interactive(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", config={"decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0},
                                                 "system": {"max_queue_size": 1}})
    stack.faults(stack.gpu_url, paused=True)
    results: list[httpx.Response] = []
    shed: list[httpx.Response] = []
    running = threading.Thread(target=_post, args=(stack, results, None, 20))
    sheddable = threading.Thread(target=_post, args=(stack, shed, {"x-syshax-class": "sheddable"}))
    interactive = threading.Thread(target=_post, args=(stack, results))
    try:
        running.start()
        assert wait_until(lambda: stack.metric("syshax_decisions_total") == 1)
        sheddable.start()
        assert wait_until(lambda: stack.metric("syshax_class_queue_depth", **{"class": "sheddable"}) == 1)
        interactive.start()  # the line is full: the sheddable request gives up its place
        sheddable.join(60)
        assert wait_until(lambda: stack.metric("syshax_queue_depth") == 1)
    finally:
        stack.faults(stack.gpu_url, paused=False)
        for thread in (running, sheddable, interactive):
            thread.join(60)
    assert shed[0].status_code == 429
    assert shed[0].headers["x-syshax-refused-reason"] == "shed"
    assert shed[0].headers["x-syshax-class"] == "sheddable"
    assert stack.metric("syshax_class_refusals_total", **{"class": "sheddable"}, reason="shed") == 1
    assert stack.metric("syshax_class_refusals_total", **{"class": "interactive"}) == 0
    assert [r.status_code for r in results] == [200, 200]
    assert {r.headers["x-syshax-class"] for r in results} == {"interactive"}


def test_a_batch_request_behind_a_steady_interactive_stream_completes(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", speed=5.0,
                       config={"decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0},
                               "service": {"promote_after_s": 1.0}})
    stop = threading.Event()
    served: list[httpx.Response] = []

    def interactive() -> None:
        while not stop.is_set():
            _post(stack, served, None, 8)

    streams = [threading.Thread(target=interactive) for _ in range(3)]
    batch: list[httpx.Response] = []
    try:
        for thread in streams:
            thread.start()
        assert wait_until(lambda: stack.metric("syshax_queue_depth") >= 1)
        started = len(served)
        _post(stack, batch, {"x-syshax-class": "batch"}, 8)
        overtaken = len(served) - started
    finally:
        stop.set()
        for thread in streams:
            thread.join(60)
    assert batch[0].status_code == 200, batch[0].text
    assert batch[0].headers["x-syshax-class"] == "batch"
    # Interactive requests went ahead of it while it waited (priority), and it still ran (promotion).
    assert overtaken >= 1
    record = next(r for r in _records(stack) if r["request_id"] == batch[0].headers["x-request-id"])
    assert record["queued"] > 0 and record["decision"]["service_class"] == "batch"
