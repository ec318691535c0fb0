"""Stop strings: where an answer ends, and what a stream shows of it before it ends."""

from __future__ import annotations

from sim import textgen
from sim.stops import StopHit, StreamText, find_stop

KEY = 1
#: The answer of KEY, token by token.
TOKENS = [textgen.token_text(KEY, i) for i in range(12)]
TEXT = "".join(TOKENS)


def test_the_answer_names_its_tokens() -> None:
    # The cases below are written against this text.
    assert TEXT == "No them those world same ash do but their plan but more"


def test_the_first_stop_string_ends_the_answer_and_its_token_counts() -> None:
    assert find_stop(KEY, 0, 12, ("ash",)) == StopHit(6, TEXT.index("ash"), "ash")
    # a stop string across two tokens is found when its second token completes it
    assert find_stop(KEY, 0, 12, ("e w",)) == StopHit(4, TEXT.index("e w"), "e w")
    # the first occurrence wins ("but" is there twice)
    assert find_stop(KEY, 0, 12, ("but",)) == StopHit(8, TEXT.index("but"), "but")


def test_no_stop_string_or_none_within_the_limit_is_no_hit() -> None:
    assert find_stop(KEY, 0, 12, ()) is None
    assert find_stop(KEY, 0, 12, ("zzz",)) is None
    assert find_stop(KEY, 0, 5, ("ash",)) is None  # the answer ends before "ash"


def test_a_continued_answer_is_searched_from_its_offset() -> None:
    # tokens 5.. read " ash do but": the cut counts from where this part begins
    assert find_stop(KEY, 5, 7, ("but",)) == StopHit(3, len(" ash do "), "but")


def test_of_two_stop_strings_completed_by_one_token_llama_takes_the_first_to_begin_vllm_the_first_listed() -> None:
    stops = ("world", "e w")  # both end in " world"; "e w" begins two characters earlier
    assert find_stop(KEY, 0, 12, stops) == StopHit(4, TEXT.index("e w"), "e w")
    assert find_stop(KEY, 0, 12, stops, first_listed=True) == StopHit(4, TEXT.index("world"), "world")


def test_an_empty_stop_string_ends_the_answer_at_its_first_token() -> None:
    # llama-server accepts it (vLLM refuses it before this point)
    assert find_stop(KEY, 0, 12, ("",)) == StopHit(1, 0, "")


def _stream(stops: tuple[str, ...], limit: int, llama: bool) -> list[str]:
    hit = find_stop(KEY, 0, limit, stops, first_listed=not llama)
    tokens, reason = (hit.tokens, "stop") if hit else (limit, "length")
    text = StreamText(KEY, 0, stops, hit.cut if hit else None, llama=llama)
    return [text.next(reason if i == tokens - 1 else None) for i in range(tokens)]


def test_without_stop_strings_each_token_shows_its_text() -> None:
    assert _stream((), 12, llama=True) == TOKENS
    assert _stream((), 12, llama=False) == TOKENS


def test_llama_holds_back_text_that_may_begin_a_stop_string() -> None:
    pieces = _stream(("do b",), 12, llama=True)
    # " world" ends with the "d" of "do b": held (an empty piece) and sent with " same";
    # " do" may begin it too, and " but" completes it: what was held before it is cut
    assert pieces == ["No", " them", " those", "", " world same", " ash", "", " "]
    assert "".join(pieces) == TEXT[: TEXT.index("do b")]


def test_llama_sends_held_text_once_the_stop_string_is_ruled_out() -> None:
    pieces = _stream(("do x",), 12, llama=True)
    assert pieces[6:8] == ["", " do but"]
    assert "".join(pieces) == TEXT


def test_llama_loses_held_text_from_a_stream_that_ends_by_its_length() -> None:
    # as the real server does: the non-streamed answer has " do", the stream does not
    pieces = _stream(("do b",), 7, llama=True)
    assert pieces[-2:] == [" ash", ""]
    assert "".join(pieces) == TEXT[: TEXT.index(" do")]


def test_vllm_holds_back_the_longest_stop_string_less_one_character() -> None:
    pieces = _stream(("do b",), 12, llama=False)
    assert "".join(pieces) == TEXT[: TEXT.index("do b")]
    shown = 0
    for i, piece in enumerate(pieces[:-1]):
        shown += len(piece)
        assert shown == max(0, len("".join(TOKENS[: i + 1])) - 3)


def test_vllm_sends_all_it_held_when_the_answer_ends() -> None:
    pieces = _stream(("zzzz",), 12, llama=False)
    assert "".join(pieces) == TEXT
    assert pieces[-1].endswith("more") and len(pieces[-1]) > len(TOKENS[-1])
