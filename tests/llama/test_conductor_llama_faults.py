"""syshaxd in front of two real llama-servers when things go wrong: a server dies, the pair differs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest

from tests.llama._util import GREEDY, NO_EOS
from tests.plugins.llama_stack import LlamaStack, LlamaStackFactory

pytestmark = pytest.mark.llama

#: 4096 tokens per slot (the tiny model's training context caps it there anyway).
N_CTX = 4 * 4096
LONG: dict[str, Any] = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 3000, **NO_EOS}


def _wait_engine(stack: LlamaStack, name: str, state: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = {e.name: e.state for e in stack.state().engines}
        if seen.get(name) == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {state}: {seen}")


async def _wait_busy(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=10) as http:
        while not any(s["is_processing"] for s in (await http.get(f"{url}/slots")).json()):
            assert time.monotonic() < deadline, f"{url} never started the request"
            await asyncio.sleep(0.02)


def test_killing_the_server_mid_stream_ends_the_stream_and_the_next_request_goes_to_the_other(
    llama_stack: LlamaStackFactory,
) -> None:
    stack = llama_stack(n_ctx=N_CTX)
    client = stack.openai(timeout=60)
    stream = client.completions.create(model="tiny", prompt=LONG["prompt"], max_tokens=LONG["max_tokens"],
                                       stream=True, extra_body={**NO_EOS})
    first = next(stream)
    assert first.model == "gpu-role"  # the classic policy sends it to the idle GPU
    stack.gpu.proc.kill()
    stack.gpu.proc.wait(timeout=10)
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    assert "gpu0" in str(caught.value)
    decision = next(d for d in reversed(stack.state().recent_decisions) if d.engine == "gpu0")
    assert decision.outcome == "engine_error"

    answer = client.completions.create(model="tiny", prompt="next", max_tokens=5, extra_body={**NO_EOS})
    assert answer.model == "cpu-role"
    assert answer.choices[0].finish_reason == "length"
    _wait_engine(stack, "gpu0", "down")


async def test_a_non_streamed_request_whose_server_dies_is_answered_by_the_other(
    llama_stack: LlamaStackFactory,
) -> None:
    stack = llama_stack(n_ctx=N_CTX)
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        # Long enough that the server is still generating when the poll sees it busy.
        request = asyncio.create_task(http.post("/v1/completions", json={**LONG, "max_tokens": 1500, **GREEDY}))
        await _wait_busy(stack.gpu.url)
        stack.gpu.proc.kill()
        resp = await request
    # The client had no byte yet (the conductor streams from llama-server and answers at the
    # end), so the request is resubmitted whole to the other device.
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["model"] == "cpu-role"
    assert data["usage"]["completion_tokens"] == 1500
    decision = next(d for d in reversed(stack.state().recent_decisions) if d.outcome is not None)
    assert decision.engine == "cpu0" and decision.reason.startswith("resubmitted: gpu0 failed")


def test_a_pair_with_another_kv_layout_is_refused_at_start_and_splits_run_whole(
    llama_stack: LlamaStackFactory,
) -> None:
    # Same model file, but 2 slots of 2048 tokens on the CPU side instead of 4 of 1024.
    stack = llama_stack(cpu_args=("--alias", "cpu-role", "-np", "2"))
    log = stack.wait_log("llamacpp-slots gpu0 -> cpu0 cannot hand off KV caches")
    assert "slot_n_ctx: 1024 on prefill, 2048 on decode" in log
    assert "total_slots: 4 on prefill, 2 on decode" in log

    body = {"model": "tiny", "messages": [{"role": "user", "content": "split?"}], "max_tokens": 6, **GREEDY}
    resp = httpx.post(f"{stack.url}/v1/chat/pd_disagg", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == "cpu-role"
    decision = stack.state().recent_decisions[-1]
    assert decision.mode == "whole" and decision.engine == "cpu0"
    assert "split failed before decoding" in decision.reason and "total_slots" in decision.reason
    assert not any((stack.dir / "slots").iterdir()), "a slot file was written for an unusable pair"
