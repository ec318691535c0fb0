"""KV caches handed from one simulated engine to another.

Engines started in one process (``sim pair``) share one :class:`KvStore`: a prefill
side puts an entry under a key (the completion id for ``syshax``, engine id + request
id for ``kv-transfer``), a decode side takes it and pays a transfer time instead of a
prefill. A key that is not found means the decode side recomputes the prefill (and
says so in the ``X-Sim-Handoff`` response header). llama.cpp slot files
(``--slot-save-path``) are JSON files describing the saved cache.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sim.llama_params import LlamaParams

HANDOFF_HEADER = "X-Sim-Handoff"


@dataclass(frozen=True)
class KvEntry:
    """One handed-off KV cache."""

    origin: str  # engine name that computed it
    kv_tokens: int  # tokens whose KV is in the cache
    generated: int  # answer tokens generated so far (the next one has this index)
    text_key: int  # names the answer's text (see textgen)
    release: Callable[[], None] | None = None  # frees the origin's blocks when taken


class KvStore:
    """Handed-off KV caches by key, shared by the engines of one process."""

    def __init__(self) -> None:
        self._entries: dict[str, KvEntry] = {}
        self._lock = threading.Lock()

    def put(self, key: str, entry: KvEntry) -> None:
        """Store an entry (replacing one under the same key)."""
        with self._lock:
            old = self._entries.pop(key, None)
            self._entries[key] = entry
        if old is not None and old.release is not None:
            old.release()

    def take(self, key: str) -> KvEntry | None:
        """Remove and return an entry; its origin's blocks are released."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is not None and entry.release is not None:
            entry.release()
        return entry

    def drop_origin(self, origin: str) -> None:
        """Forget every entry an engine made (it is shutting down)."""
        with self._lock:
            for key in [k for k, e in self._entries.items() if e.origin == origin]:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class SlotCache:
    """What a llama.cpp slot holds after a request: the prompt it saw and its token count."""

    fingerprint: str = ""
    tokens: int = 0
    text_key: int = 0
    generated: int = 0
    task: int = -1  # llama.cpp id_task of the last request (-1: the slot never ran one)
    used_at: float = 0.0  # monotonic time its last request ended (llama.cpp reuses the oldest idle slot)
    params: LlamaParams = field(default_factory=LlamaParams)  # the last request's params (/slots shows them)


class SlotFileError(Exception):
    """A slot save/restore that llama-server would refuse."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


_FILENAME = re.compile(r"^[A-Za-z0-9._-]+$")


def slot_file(folder: Path | None, filename: object) -> Path:
    """The path of a slot file, refusing what llama-server refuses."""
    if folder is None:
        raise SlotFileError(
            "This server does not support slots action. Start it with `--slot-save-path`",
            status=501,
            kind="not_supported_error",
        )
    if not isinstance(filename, str) or not _FILENAME.match(filename) or filename in (".", ".."):
        raise SlotFileError("Invalid filename")
    return folder / filename


def save_slot(path: Path, cache: SlotCache, model: str, kv_bytes_per_token: float) -> int:
    """Write a slot file atomically; returns the bytes a real cache file would take."""
    data = {
        "format": "syshax-sim-slot/1",
        "model": model,
        "fingerprint": cache.fingerprint,
        "tokens": cache.tokens,
        "text_key": cache.text_key,
        "generated": cache.generated,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
    return int(cache.tokens * kv_bytes_per_token)


def restore_slot(path: Path, model: str) -> SlotCache:
    """Read a slot file written by :func:`save_slot` for the same model."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SlotFileError("Unable to restore slot: No available space in KV cache or invalid slot save file", status=400) from None
    except (OSError, ValueError):
        raise SlotFileError("Failed to restore slot: unreadable file", status=400) from None
    if not isinstance(data, dict) or data.get("format") != "syshax-sim-slot/1":
        raise SlotFileError("Failed to restore slot: not a slot file", status=400)
    if data.get("model") != model:
        # llama-server would load it and produce garbage; the simulator says it plainly
        raise SlotFileError(f"Failed to restore slot: saved for model {data.get('model')!r}, this is {model!r}", status=400)
    return SlotCache(
        fingerprint=str(data.get("fingerprint", "")),
        tokens=int(data.get("tokens", 0)),
        text_key=int(data.get("text_key", 0)),
        generated=int(data.get("generated", 0)),
    )
