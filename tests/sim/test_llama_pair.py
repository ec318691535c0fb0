"""A simulated llama.cpp pair passes the conductor's `llamacpp-slots` pair check and really hands off."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from syshaxd.conductor.handoff.llamacpp_slots import PairMismatch, check_pair, fetch_identity


def _check(a_url: str, b_url: str) -> Any:
    async def run() -> Any:
        async with httpx.AsyncClient(base_url=a_url, timeout=10) as a, httpx.AsyncClient(base_url=b_url, timeout=10) as b:
            return await check_pair(a, b)

    return asyncio.run(run())


def test_a_default_llama_pair_passes_the_pair_check(sim_pair: Any, tmp_path: Path) -> None:
    # The profiles differ (bf16 GPU, q4 CPU, other slot counts): the pair still loads one file.
    gpu, cpu = sim_pair(gpu_profile="gpu-a100", cpu_profile="cpu-kunpeng920-q4", gpu_dialect="llamacpp",
                        cpu_dialect="llamacpp", slot_save_path=tmp_path)
    a, b = _check(gpu.url, cpu.url)
    assert a == b
    assert a.slot_n_ctx == a.n_ctx_train and a.total_slots == 64  # the CPU profile's sequences
    props = httpx.get(f"{cpu.url}/props").json()
    assert props["default_generation_settings"]["n_ctx"] == a.slot_n_ctx
    assert len(httpx.get(f"{cpu.url}/slots").json()) == props["total_slots"]


def test_the_greedy_probe_gives_the_same_text_on_both_sides(sim_pair: Any, tmp_path: Path) -> None:
    gpu, cpu = sim_pair(gpu_dialect="llamacpp", cpu_dialect="llamacpp", slot_save_path=tmp_path)
    body = {"prompt": "the quick brown fox", "n_predict": 8, "temperature": 0.0, "ignore_eos": True}
    answers = [httpx.post(f"{e.url}/completion", json=body, timeout=10).json() for e in (gpu, cpu)]
    assert answers[0]["content"] == answers[1]["content"] != ""
    assert answers[0]["tokens_predicted"] == 8 and answers[0]["stop_type"] == "limit"
    assert answers[0]["timings"]["predicted_n"] == 8


def test_different_models_or_layouts_fail_the_pair_check(sim_engine: Any, tmp_path: Path) -> None:
    tiny = sim_engine("tiny", dialect="llamacpp", slot_save_path=tmp_path, parallel=4, ctx_size=2048)
    other = sim_engine("null", dialect="llamacpp", slot_save_path=tmp_path, parallel=4, ctx_size=2048)
    with pytest.raises(PairMismatch, match="n_embd"):
        _check(tiny.url, other.url)
    fewer = sim_engine("tiny", dialect="llamacpp", slot_save_path=tmp_path, parallel=2, ctx_size=2048)
    with pytest.raises(PairMismatch, match="total_slots: 4 on prefill, 2 on decode"):
        _check(tiny.url, fewer.url)
    no_files = sim_engine("tiny", dialect="llamacpp", parallel=4, ctx_size=2048)
    with pytest.raises(PairMismatch, match="slot-save-path"):
        _check(tiny.url, no_files.url)


def test_per_slot_context_is_capped_at_the_training_context(sim_engine: Any) -> None:
    # tiny is trained for 2048 tokens: 2 slots out of 32768 still get 2048 each.
    engine = sim_engine("tiny", dialect="llamacpp", parallel=2, ctx_size=32768)
    async def identify() -> Any:
        async with httpx.AsyncClient(base_url=engine.url, timeout=10) as client:
            return await fetch_identity(client, side="x")

    identity = asyncio.run(identify())
    assert identity.slot_n_ctx == 2048 == identity.n_ctx_train
    assert [s["n_ctx"] for s in httpx.get(f"{engine.url}/slots").json()] == [2048, 2048]


def test_a_split_through_syshaxd_restores_the_slot_on_the_decode_side(make_stack: Any, tmp_path: Path) -> None:
    slots = tmp_path / "slots"
    slots.mkdir()
    stack = make_stack(handoff="llamacpp-slots", dialect="llamacpp", slot_dir=slots)
    body = {"model": "ds-32b", "messages": [{"role": "user", "content": "split me across the pair"}],
            "max_tokens": 6, "ignore_eos": True}
    whole = httpx.post(f"{stack.cpu_url}/v1/chat/completions", json=body, timeout=30).json()
    resp = httpx.post(f"{stack.url}/v1/chat/pd_disagg", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["choices"][0]["message"]["content"] == whole["choices"][0]["message"]["content"]
    assert httpx.get(f"{stack.cpu_url}/sim/stats").json()["handoffs"].get("handoff_slot") == 1
    assert any(p.name.startswith("syshax-") for p in slots.iterdir())
    assert "can hand off KV caches" in stack.log_text()


def test_pair_flags_set_both_servers_layout(sim_pair: Any, tmp_path: Path) -> None:
    gpu, cpu = sim_pair(gpu_dialect="llamacpp", cpu_dialect="llamacpp", slot_save_path=tmp_path, parallel=3,
                        ctx_size=600)
    a, b = _check(gpu.url, cpu.url)
    assert (a.total_slots, a.slot_n_ctx) == (b.total_slots, b.slot_n_ctx) == (3, 200)
