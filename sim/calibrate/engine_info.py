"""What a live engine says about itself: its dialect, model, limits, KV room and load.

Read through the engine's own endpoints and parsed here, at the boundary, into
:class:`EngineFacts`: ``/props``, ``/slots`` and ``/v1/models`` (llama.cpp's
``llama-server``), ``/v1/models`` and ``/metrics`` (vLLM V1). Load (requests running or
waiting) comes from ``/metrics`` through the daemon's own dialect parsers, so calibrate and
the daemon agree on what "busy" means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from syshaxd.engines import get_dialect

DIALECTS = ("vllm-v1", "llamacpp")


class EngineInfoError(Exception):
    """The engine cannot be reached or does not answer like the dialect it was taken for."""


@dataclass(frozen=True)
class EngineFacts:
    """One engine, as its API describes it (None: the engine does not say)."""

    url: str
    dialect: str
    model: str
    max_model_len: int | None = None
    max_num_seqs: int | None = None  # llama.cpp: slots
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    n_params: int | None = None
    model_bytes: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class Load:
    """Requests the engine is serving now."""

    running: int
    waiting: int

    @property
    def busy(self) -> bool:
        """Whether anything is running or waiting."""
        return self.running > 0 or self.waiting > 0


def _get(client: httpx.Client, path: str) -> httpx.Response:
    try:
        return client.get(path)
    except httpx.HTTPError as exc:
        raise EngineInfoError(f"cannot reach {client.base_url}{path}: {exc}") from None


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise EngineInfoError(f"{resp.request.url} did not answer JSON") from None


def detect_dialect(client: httpx.Client) -> str:
    """``llamacpp`` when ``/props`` names slots, else ``vllm-v1`` when ``/metrics`` has vLLM's."""
    resp = _get(client, "/props")
    if resp.status_code == 200 and isinstance(_json(resp), dict) and "total_slots" in resp.json():
        return "llamacpp"
    metrics = _get(client, "/metrics")
    if metrics.status_code == 200 and "vllm:" in metrics.text:
        return "vllm-v1"
    raise EngineInfoError(f"{client.base_url} is neither a llama-server (/props) nor a vLLM engine (/metrics); "
                          "name it with --dialect")


def _first_model(client: httpx.Client) -> dict[str, Any]:
    resp = _get(client, "/v1/models")
    data = _json(resp).get("data") if resp.status_code == 200 and isinstance(_json(resp), dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise EngineInfoError(f"{client.base_url}/v1/models lists no model (HTTP {resp.status_code})")
    return data[0]


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0:
        return int(value)
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def _llamacpp(client: httpx.Client, card: dict[str, Any]) -> EngineFacts:
    props = _json(_get(client, "/props"))
    settings = props.get("default_generation_settings") or {}
    slots_resp = _get(client, "/slots")
    slots = _json(slots_resp) if slots_resp.status_code == 200 else None
    n_slots = _int(props.get("total_slots")) or (len(slots) if isinstance(slots, list) else None)
    slot_ctx = _int(settings.get("n_ctx"))
    if isinstance(slots, list) and slots and isinstance(slots[0], dict):
        slot_ctx = _int(slots[0].get("n_ctx")) or slot_ctx
    raw_meta = card.get("meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    capacity = slot_ctx * n_slots if slot_ctx and n_slots else None
    return EngineFacts(url=str(client.base_url), dialect="llamacpp", model=str(card.get("id", "")),
                       max_model_len=slot_ctx, max_num_seqs=n_slots, kv_capacity_tokens=capacity,
                       n_params=_int(meta.get("n_params")), model_bytes=_int(meta.get("size")),
                       hidden_size=_int(meta.get("n_embd")), vocab_size=_int(meta.get("n_vocab")))


def _cache_config(text: str) -> tuple[int | None, int | None]:
    """``(num_gpu_blocks, block_size)`` from vLLM's ``cache_config_info`` labels."""
    try:
        for family in text_string_to_metric_families(text):
            if family.name == "vllm:cache_config_info":
                for sample in family.samples:
                    return _int(sample.labels.get("num_gpu_blocks")), _int(sample.labels.get("block_size"))
    except ValueError:
        return None, None
    return None, None


def _vllm(client: httpx.Client, card: dict[str, Any]) -> EngineFacts:
    blocks, block_size = _cache_config(_get(client, "/metrics").text)
    return EngineFacts(url=str(client.base_url), dialect="vllm-v1", model=str(card.get("id", "")),
                       max_model_len=_int(card.get("max_model_len")),
                       kv_capacity_tokens=blocks * block_size if blocks and block_size else None,
                       block_size=block_size)


def read_facts(client: httpx.Client, dialect: str) -> EngineFacts:
    """What the engine says about its model and limits."""
    card = _first_model(client)
    return _llamacpp(client, card) if dialect == "llamacpp" else _vllm(client, card)


def read_load(client: httpx.Client, dialect: str) -> Load:
    """Requests running and waiting, from ``/metrics`` (and llama.cpp's ``/slots``)."""
    resp = _get(client, "/metrics")
    if resp.status_code != 200:
        raise EngineInfoError(f"{client.base_url}/metrics answered HTTP {resp.status_code}; "
                              "calibrate needs it to see whether the engine is serving (llama-server: --metrics)")
    metrics = get_dialect(dialect).parse(resp.text)
    running, waiting = metrics.running or 0, metrics.waiting or 0
    if dialect == "llamacpp":
        slots = _get(client, "/slots")
        if slots.status_code == 200 and isinstance(_json(slots), list):
            running = max(running, sum(1 for s in slots.json() if isinstance(s, dict) and s.get("is_processing")))
    return Load(running, waiting)
