"""Pure parts of the llamacpp-slots handoff: request bodies, file names, pair comparison."""

from __future__ import annotations

import dataclasses

from syshaxd.conductor.handoff.llamacpp_slots import (
    EngineIdentity,
    compare_identities,
    decode_body,
    prefill_body,
    slot_filename,
)

IDENTITY = EngineIdentity(
    model_path="/m/tiny.gguf",
    n_vocab=32000,
    n_ctx_train=4096,
    n_embd=64,
    n_params=2171200,
    model_size=4343040,
    model_ftype="F16",
    vocab_type=1,
    slot_n_ctx=1024,
    total_slots=4,
    build_info="b1-0c1e570",
    chat_template="{{ x }}",
)


def test_prefill_body_disables_generation_and_streaming_and_pins_the_slot() -> None:
    original = {
        "messages": [],
        "max_tokens": 50,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body = prefill_body(original, 3)
    assert body["n_predict"] == 0 and body["stream"] is False
    assert body["id_slot"] == 3 and body["cache_prompt"] is True
    assert "stream_options" not in body
    assert original["stream"] is True, "the client's body must not be modified"


def test_decode_body_keeps_the_request_and_pins_the_slot() -> None:
    original = {"prompt": "x", "max_tokens": 5, "stream": True}
    assert decode_body(original, 1) == {**original, "id_slot": 1, "cache_prompt": True}


def test_slot_filename_is_safe_for_llama_server() -> None:
    name = slot_filename("../../etc/passwd req#1")
    assert "/" not in name and " " not in name and name.endswith(".bin")
    assert slot_filename("a") != slot_filename("b")


def test_compare_identities_ignores_the_path_and_names_each_difference() -> None:
    moved = dataclasses.replace(IDENTITY, model_path="/elsewhere/tiny.gguf")
    assert compare_identities(IDENTITY, moved) == []
    other = dataclasses.replace(IDENTITY, slot_n_ctx=2048, chat_template="other")
    assert compare_identities(IDENTITY, other) == [
        "slot_n_ctx: 1024 on prefill, 2048 on decode",
        "chat_template: (differs)",
    ]
