"""Which routes each dialect answers, and what an unknown route or method gets (FastAPI's or llama-server's 404)."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize("dialect,version", [("vllm-v1", "0.10.1.1"), ("vllm-v0", "0.7.3")])
def test_vllm_unknown_route_is_fastapis_404_and_version_answers(sim_engine, dialect: str, version: str) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect=dialect)
    for method, path in [("GET", "/nope"), ("POST", "/v1/nope"), ("POST", "/embeddings"), ("POST", "/v1/tokenize")]:
        r = httpx.request(method, f"{engine.url}{path}", json={})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}, path
    wrong = httpx.get(f"{engine.url}/v1/responses")
    assert wrong.status_code == 405 and wrong.json() == {"detail": "Method Not Allowed"}
    assert wrong.headers["allow"] == "POST"
    assert httpx.get(f"{engine.url}/version").json() == {"version": version}


def test_llamacpp_has_no_version_score_or_v1_tokenize(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect="llamacpp")
    for method, path in [("GET", "/version"), ("POST", "/score"), ("POST", "/v1/tokenize"), ("GET", "/responses")]:
        r = httpx.request(method, f"{engine.url}{path}", json={})
        assert r.status_code == 404, path
        assert r.json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    for path in ("/tokenize", "/detokenize", "/responses", "/v1/responses", "/embedding", "/reranking"):
        assert httpx.post(f"{engine.url}{path}", json={}).status_code != 404, path
