"""KV handoff between two real llama-servers through slot save/restore (`llamacpp-slots`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from syshaxd.conductor.handoff import llamacpp_slots as slots
from tests.llama._util import GREEDY, NO_EOS, sse_json
from tests.plugins.llama import LlamaFactory, LlamaServer
from tools.build_engines import engine_paths
from tools.tiny_gguf import TinySpec, generate

pytestmark = pytest.mark.llama

CHAT: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Tell me a long story about a fox and a crow."}],
    "max_tokens": 24,
    **GREEDY,
    **NO_EOS,
}
COMPLETION: dict[str, Any] = {
    "prompt": "The fox looked up at the crow and said",
    "max_tokens": 24,
    **GREEDY,
    **NO_EOS,
}


@pytest.fixture
async def clients(
    llama_pair: tuple[LlamaServer, LlamaServer],
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """httpx clients for the prefill (A) and decode (B) servers."""
    a, b = llama_pair
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=30) as cb,
    ):
        yield ca, cb


async def _reference(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    # Slot 3 is never used by the handoff below, so this run leaves no cache it could use.
    resp = await client.post(path, json={**body, "id_slot": 3})
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _text(data: dict[str, Any]) -> str:
    choice = data["choices"][0]
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


@pytest.mark.parametrize(
    ("path", "body"), [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)]
)
async def test_handoff_decodes_the_same_text_and_recomputes_one_token(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], path: str, body: dict[str, Any]
) -> None:
    a, b = clients
    reference = await _reference(b, path, body)
    n_prompt = reference["usage"]["prompt_tokens"]

    saved = await slots.prefill_and_save(
        a, body, id_slot=1, filename=slots.slot_filename("req/1"), path=path
    )
    assert saved.n_saved == n_prompt
    assert saved.prompt_n == n_prompt
    restored = await slots.restore(b, saved.filename, id_slot=2)
    assert restored.n_restored == n_prompt
    assert restored.n_bytes == saved.n_bytes

    decoded = (await b.post(path, json=slots.decode_body(body, 2))).json()
    assert _text(decoded) == _text(reference)
    assert decoded["timings"]["prompt_n"] == 1
    assert decoded["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1
    assert decoded["usage"]["completion_tokens"] == body["max_tokens"]


async def test_streamed_decode_after_restore_matches_too(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    reference = _text(await _reference(a, "/v1/chat/completions", CHAT))
    saved = await slots.prefill_and_save(a, CHAT, id_slot=0, filename="s.bin")
    await slots.restore(b, saved.filename, id_slot=0)
    raw = (
        await b.post("/v1/chat/completions", json={**slots.decode_body(CHAT, 0), "stream": True})
    ).text
    chunks, done = sse_json(raw)
    assert done
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == reference
    assert chunks[-1]["timings"]["prompt_n"] == 1


async def test_without_restore_the_decode_side_recomputes_the_whole_prompt(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = clients
    saved = await slots.prefill_and_save(a, CHAT, id_slot=1, filename="unused.bin")
    decoded = (await b.post("/v1/chat/completions", json=slots.decode_body(CHAT, 1))).json()
    assert decoded["timings"]["prompt_n"] == saved.n_saved


async def test_prefill_body_generates_one_token_and_keeps_the_prompt_in_the_slot(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, _ = clients
    data = (
        await a.post("/v1/chat/completions", json=slots.prefill_body({**CHAT, "stream": True}, 1))
    ).json()
    # n_predict: 0 still samples one token, but the slot keeps only the prompt.
    assert data["usage"]["completion_tokens"] == 1
    saved = (await a.post("/slots/1?action=save", json={"filename": "p.bin"})).json()
    assert saved["n_saved"] == data["usage"]["prompt_tokens"]


async def test_idle_slot_and_erase(clients: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    a, _ = clients
    assert await slots.idle_slot(a) == 0
    await slots.prefill_and_save(a, CHAT, id_slot=0, filename="e.bin")
    assert await slots.erase(a, 0) > 0
    assert await slots.erase(a, 0) == 0


async def test_restore_of_a_missing_file_is_a_handoff_error(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    _, b = clients
    with pytest.raises(slots.HandoffError) as info:
        await slots.restore(b, "never-saved.bin", id_slot=0)
    assert info.value.side == "decode"
    assert info.value.status == 400
    assert "Unable to restore slot" in str(info.value)


async def test_check_pair_accepts_a_matching_pair(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], llama_pair: tuple[LlamaServer, ...]
) -> None:
    a, b = clients
    ida, idb = await slots.check_pair(a, b)
    assert ida == idb
    assert ida.slot_n_ctx == llama_pair[0].n_ctx // llama_pair[0].n_parallel


async def test_check_pair_rejects_a_different_kv_layout(llama_factory: LlamaFactory) -> None:
    a, b = llama_factory(), llama_factory(n_parallel=2)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=30) as cb,
    ):
        with pytest.raises(slots.PairMismatch) as info:
            await slots.check_pair(ca, cb)
    message = str(info.value)
    assert "slot_n_ctx: 1024 on prefill, 2048 on decode" in message
    assert "total_slots: 4 on prefill, 2 on decode" in message


async def test_check_pair_rejects_same_shape_different_weights(
    llama_factory: LlamaFactory, tmp_path: Path
) -> None:
    a = llama_factory()
    twin = generate(engine_paths().vocab, tmp_path / "twin.gguf", TinySpec(seed=99))
    b = llama_factory(model=twin)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=30) as cb,
    ):
        with pytest.raises(slots.PairMismatch) as info:
            await slots.check_pair(ca, cb)
    assert "greedy probe" in str(info.value)
