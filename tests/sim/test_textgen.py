"""The tokenizer stand-in and the deterministic text."""

from __future__ import annotations

import pytest

from sim import textgen


@pytest.mark.parametrize(
    "text,tokens",
    [
        ("", 0),
        ("Hello", 1),
        ("Hello, world!", 4),
        ("internationalization", 4),  # 20 ASCII letters, 5 per token
        ("你好", 2),
        ("a  b\n\tc", 3),
    ],
)
def test_count_tokens(text: str, tokens: int) -> None:
    assert textgen.count_tokens(text) == tokens


def test_chat_tokens_add_template_overhead() -> None:
    assert textgen.chat_tokens(["Hello"]) == 1 + 4 + 2
    assert textgen.chat_tokens(["Hello"], add_generation_prompt=False) == 1 + 4


def test_generated_text_is_deterministic_per_key() -> None:
    key = textgen.request_key("prompt", 7)
    assert textgen.generate(key, 0, 20) == textgen.generate(key, 0, 20)
    other = textgen.request_key("prompt", 8)
    assert textgen.generate(key, 0, 20) != textgen.generate(other, 0, 20)


def test_an_answer_split_in_pieces_reads_as_the_whole() -> None:
    key = textgen.request_key("split me", None)
    whole = textgen.generate(key, 0, 30)
    assert textgen.generate(key, 0, 2) + textgen.generate(key, 2, 11) + textgen.generate(key, 13, 17) == whole


def test_each_generated_token_counts_as_one_token() -> None:
    key = textgen.request_key("count", 1)
    for n in (1, 5, 64):
        assert textgen.count_tokens(textgen.generate(key, 0, n)) == n


def test_natural_length_is_seeded_and_spread() -> None:
    lengths = [textgen.natural_length(textgen.request_key(str(i), None), 400, 1.0) for i in range(300)]
    assert lengths == [textgen.natural_length(textgen.request_key(str(i), None), 400, 1.0) for i in range(300)]
    assert min(lengths) >= 1
    lengths.sort()
    assert 200 < lengths[150] < 800  # median near 400
    assert lengths[0] < lengths[-1] / 10
