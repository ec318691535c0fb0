"""The stand-in tokenizer's token ids: text into ids and back (``/tokenize``, ``/detokenize``).

:mod:`sim.textgen` only counts tokens; this module names them. A piece is what the
counting rule calls one token (a run of ASCII letters and digits cut every 5 characters,
or one other character), carrying the whitespace before it, so ``len(encode(text)) ==
count_tokens(text)`` always. Pieces of a small table (every word the generated text
uses, with and without a leading space and capital, and every printable ASCII
character) get fixed ids and decode exactly: a generated answer survives tokenize and
detokenize unchanged. Any other piece gets an id by hashing and decodes to a stand-in
word. A chat is ChatML (``<|im_start|>role\\n content <|im_end|>\\n``): 4 template tokens
per message and 2 for the generation prompt, as ``textgen.chat_tokens`` counts them.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterator
from dataclasses import dataclass

from sim.textgen import ASCII_CHARS_PER_TOKEN, TOKEN_RE, VOCABULARY

#: DeepSeek-R1-Distill-Qwen's vocabulary size (Qwen2's): the vLLM dialects' token ids stay below it.
VLLM_VOCAB_SIZE = 152064
ROLES = ("system", "user", "assistant", "tool", "developer")


def _table() -> tuple[str, ...]:
    words = [v for w in VOCABULARY for v in (w, " " + w, w.capitalize(), " " + w.capitalize())]
    chars = [v for c in string.printable if not c.isspace() for v in (c, " " + c)]
    return tuple(dict.fromkeys([*words, *chars, "\n", *(f"{role}\n" for role in ROLES)]))


TABLE = _table()
_TABLE_INDEX = {piece: i for i, piece in enumerate(TABLE)}


@dataclass(frozen=True)
class Vocab:
    """One engine's id space: special tokens, the fixed table, then hashed pieces up to ``hashed_end``."""

    size: int
    specials: dict[int, str]  # id -> text (detokenize writes them out)
    first: int  # id of the table's first piece
    hashed_end: int  # hashed pieces take ids below this
    bos: int | None = None
    im_start: int | None = None
    im_end: int | None = None

    def piece_id(self, piece: str) -> int:
        """The id of one piece."""
        known = _TABLE_INDEX.get(piece)
        if known is not None:
            return self.first + known
        start = self.first + len(TABLE)
        digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
        return start + int.from_bytes(digest, "little") % (self.hashed_end - start)

    def piece_text(self, token: int) -> str | None:
        """The text of one id (None: not an id of this vocabulary)."""
        if token in self.specials:
            return self.specials[token]
        index = token - self.first
        if 0 <= index < len(TABLE):
            return TABLE[index]
        if self.first + len(TABLE) <= token < self.size:
            return " " + VOCABULARY[token % len(VOCABULARY)]
        return None


#: The vLLM dialects: ChatML markers where Qwen2 keeps them, no BOS.
VLLM_VOCAB = Vocab(VLLM_VOCAB_SIZE, {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"},
                   first=0, hashed_end=151643, im_start=151644, im_end=151645)


def llama_vocab(n_vocab: int) -> Vocab:
    """A llama.cpp model's SPM-style vocabulary: ``<unk>``, ``<s>``, ``</s>`` first."""
    return Vocab(n_vocab, {0: "<unk>", 1: "<s>", 2: "</s>"}, first=3, hashed_end=n_vocab, bos=1)


def pieces(text: str) -> Iterator[str]:
    """The pieces of ``text``, each with the whitespace before it (whitespace at the end is dropped)."""
    end = 0
    for match in TOKEN_RE.finditer(text):
        space, run = text[end : match.start()], match.group()
        end = match.end()
        if run[0].isascii() and run[0].isalnum():
            for i in range(0, len(run), ASCII_CHARS_PER_TOKEN):
                yield (space if i == 0 else "") + run[i : i + ASCII_CHARS_PER_TOKEN]
        else:
            yield space + run


def encode(text: str, vocab: Vocab) -> list[tuple[int, str]]:
    """``(id, piece)`` for every token of ``text``."""
    return [(vocab.piece_id(p), p) for p in pieces(text)]


def encode_chat(messages: list[tuple[str, str]], add_generation_prompt: bool, vocab: Vocab) -> list[tuple[int, str]]:
    """``(id, piece)`` of a chat under the ChatML template (the vLLM vocabulary's markers)."""
    assert vocab.im_start is not None and vocab.im_end is not None
    start = (vocab.im_start, vocab.specials[vocab.im_start])
    end = (vocab.im_end, vocab.specials[vocab.im_end])
    out: list[tuple[int, str]] = []
    for role, content in messages:
        out += [start, (vocab.piece_id(f"{role}\n"), f"{role}\n"), *encode(content, vocab), end,
                (vocab.piece_id("\n"), "\n")]
    if add_generation_prompt:
        out += [start, (vocab.piece_id("assistant\n"), "assistant\n")]
    return out


def decode(tokens: list[int], vocab: Vocab) -> tuple[str, int | None]:
    """The text of ``tokens`` and the first id that is not in the vocabulary (None: all are)."""
    parts: list[str] = []
    for token in tokens:
        text = vocab.piece_text(token)
        if text is None:
            return "".join(parts), token
        parts.append(text)
    return "".join(parts), None
