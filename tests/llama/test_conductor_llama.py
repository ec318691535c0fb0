"""syshaxd in front of two real llama-servers: the OpenAI routes, the monitor, a slot handoff.

One stack (GPU-role server, CPU-role server, syshaxd) serves every test in this module;
the tests that kill a server or break the pair start their own (test_conductor_llama_faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.llama._util import GREEDY, NO_EOS, metric_samples, predicted_total, wait_processing
from tests.plugins.llama import LlamaBuild
from tests.plugins.llama_stack import LlamaStack, start_llama_stack

pytestmark = pytest.mark.llama

#: 8192 tokens per slot: room for a generation long enough to watch under load.
N_CTX = 4 * 8192
LONG = 6000

MESSAGES = [{"role": "user", "content": "Tell me a long story about a fox and a crow."}]
PROMPT = "The fox looked up at the crow and said"


@pytest.fixture(scope="module")
def stack(llama_build: LlamaBuild) -> Iterator[LlamaStack]:
    """One syshaxd with two real llama-servers for the whole module."""
    work = Path(tempfile.mkdtemp(prefix="syshax-llama-conductor-", dir="/tmp"))
    running = start_llama_stack(llama_build, work, n_ctx=N_CTX)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(work, ignore_errors=True)


# -- the OpenAI routes through the conductor ------------------------------------------


def test_the_pair_was_checked_at_start(stack: LlamaStack) -> None:
    log = stack.wait_log("llamacpp-slots gpu0 -> cpu0 can hand off KV caches")
    assert "cannot hand off" not in log


def test_chat_through_the_conductor(stack: LlamaStack) -> None:
    client = stack.openai()
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12,
                                            extra_body={**GREEDY, **NO_EOS})
    assert answer.object == "chat.completion"
    assert answer.model in ("gpu-role", "cpu-role")  # llama-server echoes its alias
    assert answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 12
    assert answer.usage.prompt_tokens > 10


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_non_streamed_answer_has_the_servers_own_shape(stack: LlamaStack, path: str) -> None:
    # The conductor streams from llama-server and assembles the answer: it must look like
    # the one the server sends itself.
    body = {"model": "tiny", "max_tokens": 8, **GREEDY, **NO_EOS,
            **({"messages": MESSAGES} if "chat" in path else {"prompt": PROMPT})}
    direct = httpx.post(stack.gpu.url + path, json=body, timeout=30).json()
    through = httpx.post(stack.url + path, json=body, timeout=30).json()
    assert through["model"] == "gpu-role"
    assert set(through) == set(direct)
    assert set(through["choices"][0]) == set(direct["choices"][0])
    assert through["choices"] == direct["choices"]
    assert set(through["usage"]) == set(direct["usage"])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert through["usage"][key] == direct["usage"][key]
    assert through["object"] == direct["object"] and through["id"].startswith("chatcmpl-")


def test_chat_stream_through_the_conductor(stack: LlamaStack) -> None:
    client = stack.openai()
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={**GREEDY, **NO_EOS})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert text
    assert finishes == ["length"]
    assert usage and usage[-1].completion_tokens == 12


def test_completions_through_the_conductor(stack: LlamaStack) -> None:
    client = stack.openai()
    answer = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, extra_body={**GREEDY, **NO_EOS})
    assert answer.choices[0].text
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 10


def test_completions_stream_through_the_conductor(stack: LlamaStack) -> None:
    client = stack.openai()
    chunks = list(client.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, stream=True,
                                            extra_body={**GREEDY, **NO_EOS}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    whole = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, extra_body={**GREEDY, **NO_EOS})
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_engine_error_reaches_the_client_as_an_openai_error(stack: LlamaStack) -> None:
    import openai

    client = stack.openai()
    # 9000 prompt tokens do not fit an 8192-token slot: llama-server refuses up front.
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny", prompt=list(range(1, 9001)), max_tokens=4)
    assert "context" in str(caught.value).lower()


# -- a forced split with llamacpp-slots ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_forced_split_gives_the_single_server_greedy_text(stack: LlamaStack, stream: bool) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"Split me, please ({stream})."}],
            "max_tokens": 16, "seed": 7, **GREEDY, **NO_EOS}
    # The reference runs on the GPU-role server alone, in a slot the split will not see.
    reference = httpx.post(f"{stack.gpu.url}/v1/chat/completions", json={**body, "id_slot": 3}, timeout=30).json()
    expected = reference["choices"][0]["message"]["content"]

    resp = httpx.post(f"{stack.url}/v1/chat/pd_disagg", json={**body, "stream": stream}, timeout=30)
    assert resp.status_code == 200, resp.text
    if stream:
        events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        last = chunks[-1]
    else:
        last = resp.json()
        text = last["choices"][0]["message"]["content"]
    assert text == expected
    # The decode side found the whole prompt in the restored slot: it computed one token.
    assert last["timings"]["prompt_n"] == 1
    assert last["model"] == "cpu-role"
    split = [d for d in stack.state().recent_decisions if d.mode == "pd_split"]
    assert split and split[-1].engine == "gpu0+cpu0"
    assert split[-1].outcome == "ok"


async def test_concurrent_splits_each_get_their_own_slots(stack: LlamaStack) -> None:
    bodies = [{"model": "tiny", "messages": [{"role": "user", "content": f"Concurrent split number {i}."}],
               "max_tokens": 12, **GREEDY, **NO_EOS} for i in range(3)]
    async with httpx.AsyncClient(timeout=60) as http:
        references = [(await http.post(f"{stack.cpu.url}/v1/chat/completions", json={**b, "id_slot": 3})).json()
                      for b in bodies]
        answers = await asyncio.gather(*(http.post(f"{stack.url}/v1/chat/pd_disagg", json=b) for b in bodies))
    for reference, resp in zip(references, answers, strict=True):
        assert resp.status_code == 200, resp.text
        data = resp.json()
        assert data["choices"][0]["message"]["content"] == reference["choices"][0]["message"]["content"]
        # Each decode found its own prompt restored: no split restored into another's slot.
        assert data["timings"]["prompt_n"] == 1, data["timings"]


def test_split_reuses_a_bounded_set_of_slot_files(stack: LlamaStack) -> None:
    client = stack.openai()
    for i in range(3):
        client.post("/chat/pd_disagg", cast_to=object, body={
            "model": "tiny", "messages": [{"role": "user", "content": f"file {i}"}], "max_tokens": 2})
    files = sorted(p.name for p in (stack.dir / "slots").iterdir())
    assert files, "the split saved no slot file"
    # One file per GPU-side slot at most, named after it: nothing accumulates per request.
    assert len(files) <= 4
    assert all(name.startswith("syshax-gpu0-slot") for name in files)


# -- the monitor reads the real servers -------------------------------------------------


def _stream_in_background(url: str, path: str, body: dict[str, Any], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with httpx.Client(timeout=60) as http, http.stream("POST", url + path, json=body) as resp:
            for _ in resp.iter_bytes():
                if stop.is_set():
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_state_and_status_show_the_real_servers_under_load(stack: LlamaStack) -> None:
    stop = threading.Event()
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": LONG, "stream": True, **NO_EOS}
    threads = [_stream_in_background(stack.url, "/v1/completions", body, stop) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        busy = None
        while time.monotonic() < deadline:
            engines = {e.name: e for e in stack.state().engines}
            gpu = engines["gpu0"]
            # Not decode_tps: llama-server adds generated tokens to its counter only when a
            # request ends (docs/llama.md), so a rate from counter deltas reads 0 meanwhile.
            if gpu.running and gpu.kv_cache_usage:
                busy = engines
                break
            time.sleep(0.1)
        assert busy is not None, f"the monitor never saw the GPU-role server busy: {engines}"
        gpu, cpu = busy["gpu0"], busy["cpu0"]
        assert gpu.state == "up" and cpu.state == "up"
        assert gpu.dialect == "llamacpp"
        assert gpu.running is not None and gpu.running >= 1
        assert gpu.kv_cache_usage is not None and 0 < gpu.kv_cache_usage <= 1
        # The same numbers come straight from the server: /slots says who is busy.
        slots = httpx.get(f"{stack.gpu.url}/slots", timeout=5).json()
        assert any(s["is_processing"] for s in slots)
        status = subprocess.run(
            [str(Path(sys.executable).with_name("syshax")), "status", "--socket", str(stack.socket_path)],
            capture_output=True, text=True, timeout=30, env=stack.env,
        )
        assert status.returncode == 0, status.stderr
        rows = {line.split("│")[1].strip(): line for line in status.stdout.splitlines()
                if line.count("│") > 5 and line.split("│")[1].strip() in ("gpu0", "cpu0")}
        assert set(rows) == {"gpu0", "cpu0"}, status.stdout
        assert "%" in rows["gpu0"].split("│")[5]  # a KV cache figure, not "-"
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def test_monitor_counts_the_real_tokens(stack: LlamaStack) -> None:
    before = metric_samples(httpx.get(f"{stack.gpu.url}/metrics", timeout=5).text)
    client = stack.openai()
    client.completions.create(model="tiny", prompt=PROMPT, max_tokens=20, extra_body={**NO_EOS})
    after = metric_samples(httpx.get(f"{stack.gpu.url}/metrics", timeout=5).text)
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == 20


# -- a client that leaves frees the server's slot ----------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_client_disconnect_frees_the_servers_slot(stack: LlamaStack, stream: bool) -> None:
    servers = (stack.gpu.url, stack.cpu.url)
    await wait_processing(servers, busy=False)
    before = await predicted_total(servers)
    max_tokens = 3000
    body = {"model": "tiny", "prompt": f"Go on and on ({stream})", "max_tokens": max_tokens, "stream": stream,
            **NO_EOS}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        if stream:
            async with http.stream("POST", "/v1/completions", json=body) as resp:
                assert resp.status_code == 200
                chunks = resp.aiter_bytes()  # kept: a dropped iterator would close the response
                await chunks.__anext__()
                await wait_processing(servers, busy=True)
        else:
            request = asyncio.create_task(http.post("/v1/completions", json=body))
            await wait_processing(servers, busy=True)
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await request
    # The conductor closed its upstream stream: the server stops at once, even while polled.
    await wait_processing(servers, busy=False)
    generated = await predicted_total(servers) - before
    assert 0 < generated < max_tokens
