"""The one SSE reader: events from bytes however they are cut, as the format says."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syshaxd.sse import DONE, Decoder, Event, NotEventStream


def events(*chunks: bytes, strict: bool = False) -> list[Event]:
    decoder = Decoder(strict=strict)
    return [e for chunk in chunks for e in decoder.feed(chunk)]


def test_an_openai_stream_gives_one_event_per_chunk_and_done_last() -> None:
    stream = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    got = events(stream)
    assert [e.json() for e in got[:2]] == [{"a": 1}, {"a": 2}]
    assert got[-1].done and got[-1].data == DONE


def test_named_events_ids_comments_and_multiline_data() -> None:
    got = events(b": keepalive\n\nretry: 1000\nevent: state\nid: 7\ndata: x\ndata:y\n\n")
    assert got == [Event(b"x\ny", "state", "7")]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending_reads_the_same(ending: bytes) -> None:
    text = b"event: decision" + ending + b"data: {}" + ending + ending
    assert events(text) == [Event(b"{}", "decision")]


def test_a_crlf_split_between_chunks_is_one_line_end() -> None:
    assert events(b"data: a\r", b"\n\r", b"\n") == [Event(b"a")]


def test_an_event_cut_off_by_the_end_of_the_stream_is_not_dispatched() -> None:
    decoder = Decoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"trunc') == [Event(b'{"a":1}')]
    assert decoder.pending


def test_strict_refuses_garbage_and_lenient_ignores_unknown_fields() -> None:
    with pytest.raises(NotEventStream):
        events(b"<html>oops</html>\n\n", strict=True)
    with pytest.raises(NotEventStream):  # no line end yet: still refused at once
        events(b"Internal Server Error", strict=True)
    assert events(b"dat", b"a: x\n\n", strict=True) == [Event(b"x")]  # a field cut in two is fine
    assert events(b"<html>oops</html>\ndata: x\n\n") == [Event(b"x")]


def test_an_event_with_no_data_is_not_dispatched() -> None:
    assert events(b"event: ping\n\n") == []


@given(st.lists(st.tuples(st.sampled_from(["message", "state", "decision"]),
                          st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b)),
                max_size=8),
       st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=20))
def test_any_cut_of_a_stream_gives_the_same_events(sent: list[tuple[str, bytes]], cuts: list[int]) -> None:
    wire = b"".join(f"event: {name}\n".encode() + b"data: " + data + b"\n\n" for name, data in sent)
    pieces, at, i = [], 0, 0
    while at < len(wire):
        step = cuts[i % len(cuts)]
        pieces.append(wire[at:at + step])
        at, i = at + step, i + 1
    # "data: " drops exactly one space; the rest of the payload is kept byte for byte
    expected = [Event(data, name) for name, data in sent]
    assert events(*pieces) == expected == events(wire)
