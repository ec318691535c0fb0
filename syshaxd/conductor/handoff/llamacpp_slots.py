"""The `llamacpp-slots` handoff: move a prefilled KV cache between two stock llama-servers.

Sequence (both servers share one `--slot-save-path` directory, same model, same KV layout):

1. `prefill_and_save(a, ...)`: the request runs on A with `n_predict: 0` pinned to a slot
   (`id_slot`), which fills that slot's KV cache; `POST /slots/{id}?action=save` then
   writes it to a file in the shared directory.
2. `restore(b, ...)`: `POST /slots/{id}?action=restore` loads the file into a slot on B.
3. The conductor sends `decode_body(original, id_slot)` to B. B finds the whole prompt
   in that slot's cache and recomputes about one token before decoding.

llama-server does not say clearly when the pair differs in model or KV layout (a restore
fails with a vague message, or silently recomputes everything), so `check_pair` compares
both at startup. Correctness never depends on the saved cache: if another request took
the slot in between, the server's prefix match just recomputes more of the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

import httpx

#: What a slot-save filename may contain (llama-server rejects path separators and more).
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

#: Two files with the same shape have identical /props, so a short greedy run tells
#: same-shaped but different weights apart.
_PROBE = {
    "prompt": "syshax pair probe: the quick brown fox",
    "n_predict": 8,
    "temperature": 0.0,
    "top_k": 1,
    "ignore_eos": True,
    "cache_prompt": False,
}


class HandoffError(Exception):
    """A handoff step failed; `side` names the server, the message says what happened."""

    def __init__(self, side: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{side}: {message}")
        self.side = side
        self.status = status


class PairMismatch(HandoffError):
    """The two servers cannot hand off KV caches (different model or KV layout)."""


@dataclass(frozen=True)
class SavedSlot:
    """A slot saved on the prefill side."""

    id_slot: int
    filename: str
    #: Tokens in the saved cache (the prompt as A tokenized it).
    n_saved: int
    n_bytes: int
    save_ms: float
    #: Prompt tokens A computed for this request (the rest came from its own cache).
    prompt_n: int


@dataclass(frozen=True)
class RestoredSlot:
    """A slot restored on the decode side."""

    id_slot: int
    filename: str
    n_restored: int
    n_bytes: int
    restore_ms: float


@dataclass(frozen=True)
class EngineIdentity:
    """What must match between the two servers of a pair, read from /props and /v1/models."""

    model_path: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_params: int
    model_size: int
    model_ftype: str
    vocab_type: int
    #: Context per slot (`-c` / `-np` unless --kv-unified).
    slot_n_ctx: int
    total_slots: int
    build_info: str
    chat_template: str


def slot_filename(request_id: str) -> str:
    """A save-file name for a request id that llama-server accepts."""
    safe = _UNSAFE.sub("_", request_id)[:100] or "request"
    return f"syshax-{safe}.bin"


def prefill_body(body: Mapping[str, Any], id_slot: int) -> dict[str, Any]:
    """The prefill copy of an OpenAI request: no generation, no stream, pinned to a slot."""
    out = dict(body)
    # n_predict wins over max_tokens in llama-server, so the client's limit can stay.
    out.update(n_predict=0, stream=False, id_slot=id_slot, cache_prompt=True)
    out.pop("stream_options", None)
    return out


def decode_body(body: Mapping[str, Any], id_slot: int) -> dict[str, Any]:
    """The decode copy of an OpenAI request, pinned to the restored slot."""
    out = dict(body)
    out.update(id_slot=id_slot, cache_prompt=True)
    return out


def error_message(resp: httpx.Response) -> str:
    """The message of a llama-server error body ({"error": {...}}), or the raw text."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])
    return resp.text[:300]


async def _post(client: httpx.AsyncClient, side: str, url: str, body: object) -> dict[str, Any]:
    try:
        resp = await client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise HandoffError(side, f"POST {url} failed: {exc!r}") from exc
    if resp.status_code != 200:
        raise HandoffError(side, f"POST {url}: {error_message(resp)}", resp.status_code)
    data = resp.json()
    if not isinstance(data, dict):
        raise HandoffError(side, f"POST {url}: expected a JSON object, got {type(data).__name__}")
    return data


async def _get(client: httpx.AsyncClient, side: str, url: str) -> Any:
    try:
        resp = await client.get(url)
    except httpx.HTTPError as exc:
        raise HandoffError(side, f"GET {url} failed: {exc!r}") from exc
    if resp.status_code != 200:
        raise HandoffError(side, f"GET {url}: {error_message(resp)}", resp.status_code)
    return resp.json()


async def prefill_and_save(
    client: httpx.AsyncClient,
    body: Mapping[str, Any],
    *,
    id_slot: int,
    filename: str,
    path: str = "/v1/chat/completions",
    side: str = "prefill",
) -> SavedSlot:
    """Prefill body on the server behind client in slot id_slot, then save that slot.

    Args:
        client: an httpx client whose base_url is the prefill llama-server.
        body: the client's OpenAI request (chat or completions, matching path).
        id_slot: an idle slot on that server (see `idle_slot`).
        filename: a name from `slot_filename`, created in the shared slot directory.
        path: the OpenAI route the request was made to.
        side: a label for error messages.
    """
    result = await _post(client, side, path, prefill_body(body, id_slot))
    timings = result.get("timings")
    prompt_n = int(timings.get("prompt_n", 0)) if isinstance(timings, dict) else 0
    saved = await _post(client, side, f"/slots/{id_slot}?action=save", {"filename": filename})
    return SavedSlot(
        id_slot=int(saved.get("id_slot", id_slot)),
        filename=str(saved.get("filename", filename)),
        n_saved=int(saved.get("n_saved", 0)),
        n_bytes=int(saved.get("n_written", 0)),
        save_ms=float(saved.get("timings", {}).get("save_ms", 0.0)),
        prompt_n=prompt_n,
    )


async def restore(
    client: httpx.AsyncClient, filename: str, *, id_slot: int, side: str = "decode"
) -> RestoredSlot:
    """Load a saved slot file into slot id_slot of the server behind client."""
    data = await _post(client, side, f"/slots/{id_slot}?action=restore", {"filename": filename})
    return RestoredSlot(
        id_slot=int(data.get("id_slot", id_slot)),
        filename=str(data.get("filename", filename)),
        n_restored=int(data.get("n_restored", 0)),
        n_bytes=int(data.get("n_read", 0)),
        restore_ms=float(data.get("timings", {}).get("restore_ms", 0.0)),
    )


async def erase(client: httpx.AsyncClient, id_slot: int, *, side: str = "decode") -> int:
    """Drop a slot's cached tokens; return how many were erased."""
    data = await _post(client, side, f"/slots/{id_slot}?action=erase", {})
    return int(data.get("n_erased", 0))


async def idle_slot(
    client: httpx.AsyncClient, *, side: str = "prefill", exclude: Collection[int] = ()
) -> int | None:
    """The id of a slot that is not processing and not in ``exclude`` (None when there is none).

    Needs --slots.
    """
    slots = await _get(client, side, "/slots")
    if not isinstance(slots, list):
        raise HandoffError(side, "GET /slots did not return a list")
    for slot in slots:
        if isinstance(slot, dict) and not slot.get("is_processing", True):
            if int(slot["id"]) not in exclude:
                return int(slot["id"])
    return None


async def fetch_identity(client: httpx.AsyncClient, *, side: str) -> EngineIdentity:
    """Read the model and KV layout facts of one server (GET /props and /v1/models)."""
    props = await _get(client, side, "/props")
    models = await _get(client, side, "/v1/models")
    try:
        meta = models["data"][0]["meta"]
        return EngineIdentity(
            model_path=str(props["model_path"]),
            n_vocab=int(meta["n_vocab"]),
            n_ctx_train=int(meta["n_ctx_train"]),
            n_embd=int(meta["n_embd"]),
            n_params=int(meta["n_params"]),
            model_size=int(meta["size"]),
            model_ftype=str(meta.get("ftype", props.get("model_ftype", ""))),
            vocab_type=int(meta["vocab_type"]),
            slot_n_ctx=int(props["default_generation_settings"]["n_ctx"]),
            total_slots=int(props["total_slots"]),
            build_info=str(props.get("build_info", "")),
            chat_template=str(props.get("chat_template", "")),
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise HandoffError(side, f"/props or /v1/models lacks {exc}: not a llama-server?") from exc


def compare_identities(a: EngineIdentity, b: EngineIdentity) -> list[str]:
    """Human-readable differences that break a slot handoff from a to b (empty: compatible).

    The model path may differ (another host, another directory); the file's facts may not.
    """
    problems: list[str] = []
    for f in fields(EngineIdentity):
        if f.name == "model_path":
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va != vb:
            shown = (
                "(differs)" if f.name == "chat_template" else f"{va!r} on prefill, {vb!r} on decode"
            )
            problems.append(f"{f.name}: {shown}")
    return problems


async def _supports_slot_files(client: httpx.AsyncClient, side: str) -> None:
    # A non-numeric slot id is harmless: "Invalid slot ID" means slot actions are enabled,
    # "not supported" means the server was started without --slot-save-path.
    resp = await client.post("/slots/x?action=save", json={"filename": "probe.bin"})
    if resp.status_code in (501,) or "slot-save-path" in error_message(resp):
        raise PairMismatch(side, "started without --slot-save-path; slot handoff is impossible")


async def _greedy_probe(client: httpx.AsyncClient, side: str) -> str:
    data = await _post(client, side, "/completion", _PROBE)
    return str(data.get("content", ""))


async def check_pair(
    prefill: httpx.AsyncClient, decode: httpx.AsyncClient, *, probe: bool = True
) -> tuple[EngineIdentity, EngineIdentity]:
    """Check that two llama-servers can hand off slots; raise PairMismatch saying why not.

    Compares the model facts and KV layout from /props and /v1/models, checks that both
    accept slot files (--slot-save-path), and with probe=True compares an 8-token greedy
    completion, which catches same-shaped models with different weights.
    """
    a = await fetch_identity(prefill, side="prefill")
    b = await fetch_identity(decode, side="decode")
    problems = compare_identities(a, b)
    if not problems and probe:
        text_a = await _greedy_probe(prefill, "prefill")
        text_b = await _greedy_probe(decode, "decode")
        if text_a != text_b:
            problems.append(
                f"greedy probe: {text_a!r} on prefill, {text_b!r} on decode (different weights)"
            )
    if problems:
        raise PairMismatch(
            "pair",
            "llamacpp-slots needs the same model file and KV layout on both servers (same "
            f"-c and -np, same build); {a.model_path} vs {b.model_path} differ in: "
            + "; ".join(problems),
        )
    await _supports_slot_files(prefill, "prefill")
    await _supports_slot_files(decode, "decode")
    return a, b
