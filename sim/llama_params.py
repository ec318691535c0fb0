"""The sampling params llama-server keeps per task and shows in ``GET /slots``.

A slot shows its task's ``params`` while it runs and keeps showing them once it is
released, until the next task (checked against a real llama-server: ``n_predict`` as the
request asked, -1 without a limit; ``chat_format`` ``peg-native`` for a chat with this
template, ``Content-only`` for completions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: llama.cpp's LLAMA_DEFAULT_SEED: what /slots shows when the request names no seed.
DEFAULT_SEED = 4294967295
SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


@dataclass(frozen=True)
class LlamaParams:
    """What ``/slots`` shows of one task's params (the rest are llama-server's defaults)."""

    n_predict: int = -1  # as asked: n_predict, else max_tokens, else -1 (no limit)
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = DEFAULT_SEED
    ignore_eos: bool = False
    stream: bool = False
    chat_format: str = "Content-only"


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def llama_params(body: dict[str, Any], *, chat: bool, n_predict: int | None, stream: bool,
                 ignore_eos: bool, seed: int | None) -> LlamaParams:
    """The params of one request (``n_predict``: the limit it asked for, None for none)."""
    defaults = LlamaParams()
    return LlamaParams(
        n_predict=-1 if n_predict is None else n_predict,
        temperature=_number(body, "temperature", defaults.temperature),
        top_k=int(_number(body, "top_k", defaults.top_k)),
        top_p=_number(body, "top_p", defaults.top_p),
        min_p=_number(body, "min_p", defaults.min_p),
        seed=DEFAULT_SEED if seed is None or seed < 0 else seed,
        ignore_eos=ignore_eos,
        stream=stream,
        chat_format="peg-native" if chat else "Content-only",
    )


def params_json(p: LlamaParams) -> dict[str, Any]:
    """The ``params`` object of a ``/slots`` entry."""
    return {
        "seed": p.seed, "temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
        "typical_p": 1.0, "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "max_tokens": p.n_predict, "n_predict": p.n_predict, "n_keep": 0,
        "n_discard": 0, "ignore_eos": p.ignore_eos, "stream": p.stream, "n_probs": 0, "min_keep": 0,
        "chat_format": p.chat_format, "samplers": SAMPLERS, "lora": [],
    }
