"""Deterministic stand-ins for what pooling models compute: embeddings and relevance scores.

No model weights: an embedding is a unit vector of normally distributed numbers seeded
by the input's token ids (the same text, or its ids from ``/tokenize``, always gets the
same vector); a relevance score is mostly how many of the query's words the document
has (so a document that shares the query's words ranks first), plus a little seeded
noise that breaks ties, squashed into (0, 1) like a cross-encoder's sigmoid output.
"""

from __future__ import annotations

import hashlib
import math
import random
import re

_WORD = re.compile(r"\w+")


def _seed(*parts: object) -> int:
    digest = hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def embedding(token_ids: list[int], dimensions: int) -> list[float]:
    """A unit vector of ``dimensions`` numbers, the same for the same token ids."""
    rng = random.Random(_seed("embedding", *token_ids))
    vector = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def relevance(query: str, document: str) -> float:
    """How well ``document`` answers ``query``, in (0, 1); the same pair always scores the same."""
    wanted = {w.lower() for w in _WORD.findall(query)}
    found = {w.lower() for w in _WORD.findall(document)}
    overlap = len(wanted & found) / len(wanted) if wanted else 0.0
    noise = random.Random(_seed("relevance", query, document)).random()
    logit = 8.0 * overlap + noise - 4.0
    return 1.0 / (1.0 + math.exp(-logit))
