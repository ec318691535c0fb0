"""``kv-transfer``: vLLM v1 KV connectors (NixlConnector), as vLLM's disaggregated proxy does it.

One request id goes to both sides as ``X-Request-Id``. The prefill copy asks for one
token with ``do_remote_decode``; its answer's ``kv_transfer_params`` go, untouched, into
the original request sent to the decode side, which streams the answer.
"""

from __future__ import annotations

import json

from syshaxd.conductor.handoff.context import DecodeRequest, SplitContext, with_token_limit
from syshaxd.engines import EngineFailure

PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


async def prefill(ctx: SplitContext) -> DecodeRequest:
    """Run the prefill on the GPU and build the decode request for the CPU."""
    parsed = ctx.parsed
    headers = {"X-Request-Id": ctx.request_id}
    body = with_token_limit(parsed.body, 1)
    body["kv_transfer_params"] = dict(PREFILL_PARAMS)
    body["stream"] = False
    for key in ("stream_options", "min_tokens"):
        body.pop(key, None)
    data, _ = await ctx.gpu.post_json(parsed.path, json.dumps(body).encode(), headers)
    ctx.flight.release(ctx.gpu)
    params = data.get("kv_transfer_params")
    if not isinstance(params, dict):
        raise EngineFailure(ctx.gpu.name, "prefill answer carries no kv_transfer_params (is a KV connector configured?)")
    decode = dict(parsed.body, kv_transfer_params=params)
    return DecodeRequest(json.dumps(decode).encode(), headers)
