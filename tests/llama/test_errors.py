"""Error shapes of llama-server (`{"error": {"code", "message", "type"}}`), held against the
simulator's llama dialect and, for errors the engine finds, through syshaxd.

Malformed or incomplete bodies never reach an engine through syshaxd (it answers them
itself, tests/edge/test_conductor_api.py), so those run on the engines only.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.plugins.llama_targets import ALL, ENGINES, Target, run_on

pytestmark = pytest.mark.llama

TOO_LONG = "x " * 1100  # over 1024 tokens for llama-server's tokenizer and for the simulator's


def error_of(resp: httpx.Response) -> dict[str, Any]:
    """The inner error object, after checking the envelope has nothing else."""
    data = resp.json()
    assert set(data) == {"error"}, data
    err = data["error"]
    assert isinstance(err, dict)
    assert err["code"] == resp.status_code
    return err


@run_on(*ENGINES)
async def test_unknown_route_is_404_not_found_error(target: Target) -> None:
    async with target.http() as http:
        resp = await http.get("/v1/nope")
    assert resp.status_code == 404
    assert error_of(resp) == {"code": 404, "message": "File Not Found", "type": "not_found_error"}


@run_on(*ENGINES)
async def test_get_on_a_post_route_is_404_too(target: Target) -> None:
    async with target.http() as http:
        resp = await http.get("/v1/chat/completions")
    assert resp.status_code == 404
    assert error_of(resp)["type"] == "not_found_error"


@run_on(*ENGINES)
async def test_malformed_json_is_a_500_server_error(target: Target) -> None:
    async with target.http() as http:
        resp = await http.post(
            "/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"}
        )
    # A client fault reported as a server fault: the conductor must not count it
    # against the engine's health.
    assert resp.status_code == 500
    err = error_of(resp)
    assert err["type"] == "server_error"
    assert "parse error" in err["message"]


@run_on(*ENGINES)
async def test_missing_messages_is_400_invalid_request(target: Target) -> None:
    async with target.http() as http:
        resp = await http.post("/v1/chat/completions", json={})
    assert resp.status_code == 400
    assert error_of(resp) == {
        "code": 400,
        "message": "'messages' is required",
        "type": "invalid_request_error",
    }


@run_on(*ENGINES)
async def test_wrong_field_type_is_400(target: Target) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}
    async with target.http() as http:
        resp = await http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["type"] == "invalid_request_error"
    assert "max_tokens" in err["message"]


@run_on(*ALL)
@pytest.mark.parametrize("stream", [False, True])
async def test_prompt_longer_than_the_slot_context_is_400_before_any_stream(
    target: Target, stream: bool
) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": TOO_LONG}], "max_tokens": 3}
    async with target.http() as http:
        resp = await http.post("/v1/chat/completions", json={**body, "stream": stream})
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("application/json")
    err = error_of(resp)
    assert err["type"] == "exceed_context_size_error"
    assert err["n_ctx"] == target.slot_n_ctx
    assert err["n_prompt_tokens"] > err["n_ctx"]


@run_on(*ALL)
async def test_openai_client_raises_bad_request_for_context_overflow(target: Target) -> None:
    async with target.openai() as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": TOO_LONG}], max_tokens=2
            )
    assert info.value.status_code == 400
    assert "context" in info.value.message


@run_on(*ENGINES)
async def test_slot_action_errors(target: Target) -> None:
    async with target.http() as http:
        bad_id = await http.post("/slots/x?action=save", json={"filename": "a.bin"})
        bad_action = await http.post("/slots/0?action=bogus", json={})
        bad_name = await http.post("/slots/0?action=save", json={"filename": "../escape"})
        missing = await http.post("/slots/0?action=restore", json={"filename": "missing.bin"})
        no_name = await http.post("/slots/0?action=save", json={})
    assert (bad_id.status_code, error_of(bad_id)["message"]) == (400, "Invalid slot ID")
    assert (bad_action.status_code, error_of(bad_action)["message"]) == (400, "Invalid action")
    assert (bad_name.status_code, error_of(bad_name)["message"]) == (400, "Invalid filename")
    assert missing.status_code == 400
    assert "Unable to restore slot" in error_of(missing)["message"]
    # A missing body field is an uncaught exception: 500 again.
    assert no_name.status_code == 500
    assert error_of(no_name)["type"] == "server_error"


@run_on(*ENGINES)
async def test_out_of_range_id_slot_is_silently_ignored(target: Target) -> None:
    body = {"prompt": "hi", "max_tokens": 2, "id_slot": 99}
    async with target.http() as http:
        resp = await http.post("/v1/completions", json=body)
    assert resp.status_code == 200
    assert resp.json()["usage"]["completion_tokens"] >= 1
