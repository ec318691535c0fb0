"""Error shapes of the real llama-server: `{"error": {"code", "message", "type"}}`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from tests.plugins.llama import LlamaServer

pytestmark = pytest.mark.llama


@pytest.fixture
async def http(llama_server: LlamaServer) -> AsyncIterator[httpx.AsyncClient]:
    """A raw httpx client."""
    async with httpx.AsyncClient(base_url=llama_server.url, timeout=30) as client:
        yield client


def error_of(resp: httpx.Response) -> dict[str, Any]:
    """The inner error object, after checking the envelope has nothing else."""
    data = resp.json()
    assert set(data) == {"error"}, data
    err = data["error"]
    assert isinstance(err, dict)
    assert err["code"] == resp.status_code
    return err


async def test_unknown_route_is_404_not_found_error(http: httpx.AsyncClient) -> None:
    resp = await http.get("/v1/nope")
    assert resp.status_code == 404
    assert error_of(resp) == {"code": 404, "message": "File Not Found", "type": "not_found_error"}


async def test_get_on_a_post_route_is_404_too(http: httpx.AsyncClient) -> None:
    resp = await http.get("/v1/chat/completions")
    assert resp.status_code == 404
    assert error_of(resp)["type"] == "not_found_error"


async def test_malformed_json_is_a_500_server_error(http: httpx.AsyncClient) -> None:
    resp = await http.post(
        "/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"}
    )
    # A client fault reported as a server fault: the conductor must not count it
    # against the engine's health.
    assert resp.status_code == 500
    err = error_of(resp)
    assert err["type"] == "server_error"
    assert "parse error" in err["message"]


async def test_missing_messages_is_400_invalid_request(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/chat/completions", json={})
    assert resp.status_code == 400
    assert error_of(resp) == {
        "code": 400,
        "message": "'messages' is required",
        "type": "invalid_request_error",
    }


async def test_wrong_field_type_is_400(http: httpx.AsyncClient) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}
    resp = await http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400
    assert "max_tokens" in error_of(resp)["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_prompt_longer_than_the_slot_context_is_400_before_any_stream(
    http: httpx.AsyncClient, llama_server: LlamaServer, stream: bool
) -> None:
    body = {"messages": [{"role": "user", "content": "x " * 1100}], "max_tokens": 3}
    resp = await http.post("/v1/chat/completions", json={**body, "stream": stream})
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("application/json")
    err = error_of(resp)
    assert err["type"] == "exceed_context_size_error"
    assert err["n_ctx"] == llama_server.n_ctx // llama_server.n_parallel
    assert err["n_prompt_tokens"] > err["n_ctx"]


async def test_openai_client_raises_bad_request_for_context_overflow(
    llama_server: LlamaServer,
) -> None:
    async with AsyncOpenAI(base_url=llama_server.url + "/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "x " * 1100}], max_tokens=2
            )
    assert info.value.status_code == 400


async def test_slot_action_errors(http: httpx.AsyncClient) -> None:
    bad_id = await http.post("/slots/x?action=save", json={"filename": "a.bin"})
    assert (bad_id.status_code, error_of(bad_id)["message"]) == (400, "Invalid slot ID")
    bad_action = await http.post("/slots/0?action=bogus", json={})
    assert (bad_action.status_code, error_of(bad_action)["message"]) == (400, "Invalid action")
    bad_name = await http.post("/slots/0?action=save", json={"filename": "../escape"})
    assert (bad_name.status_code, error_of(bad_name)["message"]) == (400, "Invalid filename")
    missing = await http.post("/slots/0?action=restore", json={"filename": "missing.bin"})
    assert missing.status_code == 400
    assert "Unable to restore slot" in error_of(missing)["message"]
    # A missing body field is an uncaught exception: 500 again.
    no_name = await http.post("/slots/0?action=save", json={})
    assert no_name.status_code == 500


async def test_out_of_range_id_slot_is_silently_ignored(http: httpx.AsyncClient) -> None:
    body = {"prompt": "hi", "max_tokens": 2, "id_slot": 99}
    resp = await http.post("/v1/completions", json=body)
    assert resp.status_code == 200
    assert resp.json()["usage"]["completion_tokens"] >= 1
