"""A deterministic tokenizer stand-in and deterministic generated text.

Token counting (no real tokenizer is shipped): text splits into runs of ASCII letters
and digits and single other characters (punctuation, CJK characters, symbols);
whitespace is free. An ASCII run of n characters counts ceil(n / 5) tokens, anything
else one token. English prose comes out at about 1.3 tokens per word, near what BPE
tokenizers give. A chat prompt adds 4 tokens per message for the template and 2 for
the generation prompt.

Generated text: token i of an answer is a short word picked by hashing (request key, i),
so the same request (prompt and seed) always gets the same answer, and an answer split
across engines (prefill on one, decode on another) reads the same as an unsplit one.
Each generated word counts exactly one token under the stand-in.
"""

from __future__ import annotations

import hashlib
import math
import random
import re

TOKEN_RE = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")
ASCII_CHARS_PER_TOKEN = 5
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_GENERATION_PROMPT_TOKENS = 2

_WORDS = (
    "the of and to in is it that for on was with as be at by this had not are but from or "
    "have an they which one you were her all she there would their we him been has when "
    "who will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me even "
    "most made after also did many off down way where just those how too here under where "
    "while last might great old year same come since good give long house both small world "
    "light river stone cloud north south east west green blue gold iron salt wind rain snow "
    "field road town hill lake sea sky star moon sun tree leaf root seed bird fish horse "
    "bread wine milk honey fire smoke ash dust sand glass paper ink book page word line "
    "voice song dance game play rule law plan map key door wall roof floor room table chair"
).split()
VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys(w for w in _WORDS if len(w) <= ASCII_CHARS_PER_TOKEN))

_MASK = (1 << 64) - 1


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under the stand-in tokenizer."""
    n = 0
    for match in TOKEN_RE.finditer(text):
        piece = match.group()
        if piece[0].isascii() and piece[0].isalnum():
            n += -(-len(piece) // ASCII_CHARS_PER_TOKEN)
        else:
            n += 1
    return n


def chat_tokens(contents: list[str], add_generation_prompt: bool = True) -> int:
    """Prompt tokens of a chat: message contents plus template overhead."""
    n = sum(count_tokens(c) + CHAT_TOKENS_PER_MESSAGE for c in contents)
    return n + (CHAT_GENERATION_PROMPT_TOKENS if add_generation_prompt else 0)


def request_key(fingerprint: str, seed: int | None) -> int:
    """A 64-bit key naming one answer: from the prompt's fingerprint and the request's seed."""
    digest = hashlib.blake2b(f"{seed}\x00{fingerprint}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _mix(x: int) -> int:
    # splitmix64 finaliser: cheap, well-spread
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def token_text(key: int, index: int) -> str:
    """The text of token ``index`` (0-based) of the answer named by ``key``."""
    word = VOCABULARY[_mix(key ^ (index * 0x2545F4914F6CDD1D & _MASK)) % len(VOCABULARY)]
    return word.capitalize() if index == 0 else " " + word


def generate(key: int, start: int, count: int) -> str:
    """Tokens ``start`` .. ``start + count - 1`` of an answer, as text."""
    return "".join(token_text(key, i) for i in range(start, start + count))


def natural_length(key: int, median: float, sigma: float) -> int:
    """Where the answer would stop by itself (end of sequence): lognormal, seeded by the key."""
    z = random.Random(key).gauss(0.0, 1.0)
    return max(1, math.ceil(median * math.exp(sigma * z)))
