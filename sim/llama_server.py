"""What a simulated llama-server says about itself: its model file, slots and context.

llama-server describes the GGUF file it loaded (``/v1/models`` ``meta``, ``GET /props``)
and its KV layout (``-np`` slots of ``-c / -np`` tokens each, capped at the model's
training context). The conductor's ``llamacpp-slots`` pair check compares exactly these
facts, so a simulated pair that serves one model must report one file and one layout
(see :func:`pair_layout`). Also the native ``POST /completion`` answer shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sim.profile import Profile

#: The real server's build string is "b<build>-<commit>"; the simulator names itself.
BUILD_INFO = "b1-sim"
#: llama.cpp's LLAMA_VOCAB_TYPE_SPM; the simulator's stand-in tokenizer has no real vocabulary.
VOCAB_TYPE = 1
N_VOCAB = 32000
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ModelFile:
    """The GGUF file a simulated llama-server loaded (what ``/v1/models`` ``meta`` reports)."""

    path: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_params: int
    size: int
    ftype: str


def _ftype(bytes_per_param: float) -> str:
    # The weight format a profile's bytes per parameter implies (llama.cpp's ftype names).
    if bytes_per_param <= 0.6:
        return "Q4_0"
    if bytes_per_param <= 1.1:
        return "Q8_0"
    return "BF16" if bytes_per_param <= 2.1 else "F32"


def model_file(profile: Profile) -> ModelFile:
    """The model file a profile's engine would load (name, shape and weight format)."""
    ftype = _ftype(profile.weight_bytes / max(profile.parameters, 1.0))
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", profile.model_name)
    return ModelFile(
        path=f"/models/{stem}-{ftype}.gguf",
        n_vocab=N_VOCAB,
        n_ctx_train=profile.max_model_len,
        n_embd=profile.hidden_size,
        n_params=int(profile.parameters),
        size=int(profile.weight_bytes),
        ftype=ftype,
    )


@dataclass(frozen=True)
class Layout:
    """A llama-server's KV layout: ``-np`` slots sharing a ``-c`` token context."""

    slots: int
    ctx_size: int
    n_ctx_train: int

    @property
    def slot_n_ctx(self) -> int:
        """Tokens per slot: ``-c / -np``, capped at the training context (as llama-server does)."""
        return max(1, min(self.ctx_size // max(1, self.slots), self.n_ctx_train))


def layout(profile: Profile, slots: int | None = None, ctx_size: int | None = None) -> Layout:
    """A single engine's layout: by default the profile's sequences, each with the whole training context.

    That is what llama-server's defaults give (``-c 0`` = the training context, shared by
    all slots with ``--kv-unified``); the KV memory itself is the profile's paged cache.
    """
    n = slots or profile.max_num_seqs
    return Layout(n, ctx_size or n * profile.max_model_len, profile.max_model_len)


def pair_layout(gpu: Profile, cpu: Profile, slots: int | None = None, ctx_size: int | None = None) -> tuple[int, int]:
    """``(slots, ctx_size)`` for both servers of a llama.cpp pair: one layout that fits both.

    A slot handoff needs the same ``-np`` and ``-c`` on both sides, like two real servers
    started with the same flags; unset values take what the smaller side allows.
    """
    n = slots or min(gpu.max_num_seqs, cpu.max_num_seqs)
    return n, ctx_size or n * min(gpu.max_model_len, cpu.max_model_len)


def models_meta(file: ModelFile, slot_n_ctx: int) -> dict[str, Any]:
    """The ``meta`` object of the ``/v1/models`` card (``n_ctx`` is per slot)."""
    return {"vocab_type": VOCAB_TYPE, "n_vocab": file.n_vocab, "n_ctx_train": file.n_ctx_train,
            "n_embd": file.n_embd, "n_params": file.n_params, "size": file.size, "ftype": file.ftype,
            "n_ctx": slot_n_ctx}


def models_json(file: ModelFile, alias: str, slot_n_ctx: int, created: int) -> dict[str, Any]:
    """``GET /v1/models``: one model with ``--alias`` as its id, plus the Ollama-style list."""
    card = {"id": alias, "aliases": [alias], "tags": [], "object": "model", "created": created,
            "owned_by": "llamacpp", "meta": models_meta(file, slot_n_ctx)}
    ollama = {"name": alias, "model": alias, "modified_at": "", "size": "", "digest": "", "type": "model",
              "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
              "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                          "parameter_size": "", "quantization_level": ""}}
    return {"models": [ollama], "object": "list", "data": [card]}


def props_json(file: ModelFile, lay: Layout, alias: str) -> dict[str, Any]:
    """``GET /props``: the default generation settings (``n_ctx`` per slot) and the server's facts."""
    params = {"n_predict": -1, "seed": 4294967295, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
              "min_p": 0.05, "stream": False, "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p",
                                                            "top_p", "min_p", "xtc", "temperature"]}
    return {
        "default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": lay.slot_n_ctx, "speculative": False,
                                        "is_processing": False, "params": params},
        "total_slots": lay.slots,
        "model_alias": alias,
        "model_path": file.path,
        "modalities": {"vision": False, "audio": False},
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "webui": False,
        "chat_template": CHAT_TEMPLATE,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "build_info": BUILD_INFO,
        "is_sleeping": False,
    }


def native_completion(
    *, content: str, model: str, id_slot: int, prompt_tokens: int, predicted: int, cached: int,
    stop_type: str, timings: dict[str, Any], stream: bool, stopping_word: str = "",
) -> dict[str, Any]:
    """The final object of a native ``POST /completion`` (non-streamed, or the last streamed event)."""
    out: dict[str, Any] = {
        "index": 0, "content": content, "tokens": [], "id_slot": id_slot, "stop": True, "model": model,
        "tokens_predicted": predicted, "tokens_evaluated": prompt_tokens, "generation_settings": {},
        "prompt": "", "has_new_line": False, "truncated": False, "stop_type": stop_type, "stopping_word": stopping_word,
        "tokens_cached": cached + predicted, "timings": timings,
    }
    if stream:
        out.pop("tokens")
    return out


def timings(*, prompt_n: int, cache_n: int, prompt_s: float, predicted_n: int, predicted_s: float) -> dict[str, Any]:
    """llama.cpp's ``timings`` object of one request (durations in virtual milliseconds)."""
    prompt_ms, predicted_ms = prompt_s * 1000.0, predicted_s * 1000.0
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(prompt_n / prompt_s, 3) if prompt_s > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / predicted_n, 3) if predicted_n else 0.0,
        "predicted_per_second": round(predicted_n / predicted_s, 3) if predicted_s > 0 else 0.0,
    }
