"""Prefill/decode handoffs between two simulated engines over HTTP: syshax, kv-transfer, recompute, slots."""

from __future__ import annotations

from pathlib import Path

import httpx

from sim.handoff import HANDOFF_HEADER
from sim.launch import EngineHandle

PROMPT = [{"role": "user", "content": "Explain the water cycle in simple words."}]
BODY = {"model": "ds-32b", "messages": PROMPT, "max_tokens": 24, "ignore_eos": True, "seed": 5}


def post(engine: EngineHandle, body: dict[str, object], headers: dict[str, str] | None = None) -> httpx.Response:
    r = httpx.post(f"{engine.url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r


def content(r: httpx.Response) -> str:
    return str(r.json()["choices"][0]["message"]["content"])


def streamed_text(r: httpx.Response) -> str:
    import json

    parts = []
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                parts.append(chunk["choices"][0]["delta"].get("content") or "")
    return "".join(parts)


def test_syshax_protocol_continues_on_the_cpu_with_the_same_text(sim_pair) -> None:  # type: ignore[no-untyped-def]
    gpu, cpu = sim_pair()
    whole = content(post(gpu, BODY))
    head = post(gpu, {**BODY, "num_decode_tokens": 2, "stream": False})
    assert head.json()["choices"][0]["finish_reason"] == "scheduled"
    assert head.json()["usage"]["completion_tokens"] == 2
    text = content(head)
    seg1 = post(cpu, {**BODY, "request_id_inference": head.json()["id"], "num_decode_tokens": 10, "generated_text": text})
    assert seg1.headers[HANDOFF_HEADER] == "transferred"
    assert seg1.json()["choices"][0]["finish_reason"] == "scheduled"
    assert seg1.json()["id"] != head.json()["id"]
    text += content(seg1)
    seg2 = post(cpu, {**BODY, "request_id_inference": seg1.json()["id"], "num_decode_tokens": 25, "generated_text": text})
    assert seg2.headers[HANDOFF_HEADER] == "local"
    assert seg2.json()["choices"][0]["finish_reason"] == "length"
    assert seg2.json()["usage"]["completion_tokens"] == 24 - 12
    assert text + content(seg2) == whole
    stats = cpu.stats()
    assert stats["prompt_tokens"] == 2  # one recomputed token per handoff, no prefill
    assert stats["handoffs"] == {"handoff_transferred": 1, "handoff_local": 1}


def test_syshax_decode_without_kv_recomputes_and_says_so(sim_pair) -> None:  # type: ignore[no-untyped-def]
    _, cpu = sim_pair()
    r = post(cpu, {**BODY, "request_id_inference": "chatcmpl-unknown", "num_decode_tokens": 5, "generated_text": "Made sand"})
    assert r.headers[HANDOFF_HEADER] == "recomputed"
    assert r.json()["usage"]["completion_tokens"] == 5
    assert cpu.stats()["prompt_tokens"] > 10  # it paid for the whole prefill


def test_kv_transfer_protocol(sim_pair) -> None:  # type: ignore[no-untyped-def]
    gpu, cpu = sim_pair()
    whole = content(post(gpu, BODY))
    rid = {"X-Request-Id": "req-42"}
    params = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}
    prefill = post(gpu, {**BODY, "max_tokens": 1, "stream": False, "kv_transfer_params": params}, rid)
    returned = prefill.json()["kv_transfer_params"]
    assert returned["do_remote_prefill"] is True and returned["remote_engine_id"] == gpu.engine_id
    assert prefill.json()["id"] == "chatcmpl-req-42"
    assert gpu.stats()["held"] == 1  # blocks kept for the decode side
    decode = post(cpu, {**BODY, "stream": True, "kv_transfer_params": returned}, rid)
    assert decode.headers[HANDOFF_HEADER] == "transferred"
    assert streamed_text(decode) == whole
    assert gpu.stats()["held"] == 0
    assert cpu.stats()["prompt_tokens"] == 1


def test_kv_transfer_to_another_process_recomputes(sim_engine) -> None:  # type: ignore[no-untyped-def]
    prefill_side = sim_engine("tiny", name="p")
    decode_side = sim_engine("tiny", name="d")
    rid = {"X-Request-Id": "req-7"}
    prefill = post(prefill_side, {**BODY, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}, rid)
    decode = post(decode_side, {**BODY, "kv_transfer_params": prefill.json()["kv_transfer_params"]}, rid)
    assert decode.headers[HANDOFF_HEADER] == "recomputed"
    assert decode.json()["usage"]["completion_tokens"] == 24


def test_recompute_protocol_continues_the_final_message(sim_pair) -> None:  # type: ignore[no-untyped-def]
    gpu, cpu = sim_pair()
    whole = content(post(gpu, BODY))
    head = content(post(gpu, {**BODY, "max_tokens": 6}))
    tail = post(cpu, {**BODY, "max_tokens": 18, "messages": [*PROMPT, {"role": "assistant", "content": head}],
                      "continue_final_message": True, "add_generation_prompt": False})
    assert tail.json()["choices"][0]["message"]["role"] == "assistant"
    assert HANDOFF_HEADER not in tail.headers
    assert head + content(tail) == whole
    assert cpu.stats()["prompt_tokens"] > len(head.split())  # it paid its own prefill


def test_llamacpp_slots_save_and_restore(sim_pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = sim_pair(gpu_dialect="llamacpp", cpu_dialect="llamacpp", slot_save_path=tmp_path)
    body = {**BODY, "id_slot": 0, "n_predict": 0}
    prefill = post(a, body)
    # llama-server samples one token even for n_predict 0, but the slot keeps only the prompt
    assert prefill.json()["usage"]["completion_tokens"] == 1
    assert prefill.json()["choices"][0]["finish_reason"] == "length"
    prompt_tokens = prefill.json()["usage"]["prompt_tokens"]
    saved = httpx.post(f"{a.url}/slots/0?action=save", json={"filename": "conv.bin"}).json()
    assert saved["n_saved"] == prompt_tokens and (tmp_path / "conv.bin").is_file()
    restored = httpx.post(f"{b.url}/slots/1?action=restore", json={"filename": "conv.bin"}).json()
    assert restored["n_restored"] == prompt_tokens
    decode = post(b, {**BODY, "id_slot": 1, "n_predict": 10})
    assert decode.headers[HANDOFF_HEADER] == "slot"
    assert decode.json()["usage"]["completion_tokens"] == 10
    assert b.stats()["prompt_tokens"] == 1  # llama.cpp re-evaluates about one prompt token
    assert decode.json()["timings"]["prompt_n"] == 1
    assert decode.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt_tokens - 1
    slots = httpx.get(f"{b.url}/slots").json()
    # the slot caches prompt + generated - 1 (the last sampled token is never decoded)
    assert slots[1]["n_prompt_tokens"] == prompt_tokens + 9
    assert slots[1]["next_token"][0]["n_decoded"] == 0  # per-request counters reset on release


def test_llamacpp_slot_errors(sim_pair, sim_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, _ = sim_pair(gpu_dialect="llamacpp", cpu_dialect="llamacpp", slot_save_path=tmp_path)
    missing = httpx.post(f"{a.url}/slots/0?action=restore", json={"filename": "absent.bin"})
    assert missing.status_code == 400 and missing.json()["error"]["type"] == "invalid_request_error"
    sneaky = httpx.post(f"{a.url}/slots/0?action=save", json={"filename": "../x.bin"})
    assert sneaky.status_code == 400 and "Invalid filename" in sneaky.json()["error"]["message"]
    assert httpx.post(f"{a.url}/slots/99?action=save", json={"filename": "x"}).status_code == 400
    plain = sim_engine("tiny", dialect="llamacpp")
    unsupported = httpx.post(f"{plain.url}/slots/0?action=save", json={"filename": "x.bin"})
    assert unsupported.status_code == 501
