"""Stop strings: where an answer ends, and what each token of a stream shows of it.

Both servers check the text after every token: the first stop string found ends the
answer with ``finish_reason: "stop"``, the text is cut where it begins (it is not in the
answer) and the token that completed it is counted. Streams differ in what they hold
back while a stop string might still be forming (checked against a real llama-server;
vLLM from its detokenizer):

- llama-server sends nothing while the unsent text ends with the beginning of a stop
  string, then everything held at once; held text is lost when the answer ends by its
  length limit (the non-streamed answer has it). Among stop strings completed by one
  token, the one that begins first wins.
- vLLM holds back the last ``len(longest stop) - 1`` characters and sends the rest when
  the answer ends; among stop strings completed by one token, the first listed wins
  (it is the answer's ``stop_reason``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.textgen import token_text


@dataclass(frozen=True)
class StopHit:
    """Where a stop string ends an answer."""

    tokens: int  # tokens generated, the one that completed the stop string included
    cut: int  # characters of the answer's text kept
    word: str  # the stop string found


def find_stop(key: int, offset: int, limit: int, stops: tuple[str, ...], first_listed: bool = False) -> StopHit | None:
    """The first stop string in tokens ``offset`` .. ``offset + limit - 1`` of an answer, if any.

    ``first_listed``: vLLM's rule for several stop strings completed by one token.
    """
    if not stops:
        return None
    longest = max(len(word) for word in stops)
    tail, start = "", 0  # the end of the text so far, from character ``start`` on
    for i in range(limit):
        piece = token_text(key, offset + i)
        tail += piece
        found = []
        for rank, word in enumerate(stops):
            # only occurrences that end in the new token: earlier ones were found before
            pos = tail.find(word, max(0, len(tail) - len(piece) - len(word)))
            if pos >= 0:
                found.append((rank if first_listed else pos, pos, word))
        if found:
            _, pos, word = min(found)
            return StopHit(i + 1, start + pos, word)
        if len(tail) > 4 * longest + 64:
            # a stop string completed later begins in the last ``longest`` characters at the earliest
            start, tail = start + len(tail) - longest, tail[-longest:] if longest else ""
    return None


def _partial_stop(text: str, word: str) -> bool:
    """Whether ``text`` ends with the beginning of ``word`` (llama.cpp's string_find_partial_stop)."""
    return any(text.endswith(word[:n]) for n in range(1, len(word) + 1))


class StreamText:
    """The text each token of a streamed answer carries, stop strings cut and held back as the server does."""

    def __init__(self, key: int, offset: int, stops: tuple[str, ...], cut: int | None, llama: bool) -> None:
        self.key = key
        self.index = offset
        self.stops = stops
        self.cut = cut  # where the answer's text ends (a stop string), if it does
        self.llama = llama
        self.hold = max((len(s) for s in stops), default=1) - 1  # vLLM's stop_buffer_length
        self.text = ""
        self.sent = 0

    def next(self, finish_reason: str | None) -> str:
        """The text of the next token (``finish_reason``: the answer ends with it)."""
        piece = token_text(self.key, self.index)
        self.index += 1
        if not self.stops:
            return piece
        self.text += piece
        end = len(self.text)
        if finish_reason == "stop" and self.cut is not None:
            end = self.cut
        elif self.llama:
            # a natural stop (end of sequence) sends what is held; a length stop does not
            if finish_reason != "stop" and any(_partial_stop(self.text[self.sent :], w) for w in self.stops):
                end = self.sent
        elif finish_reason is None:
            end = max(self.sent, end - self.hold)
        out = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return out
