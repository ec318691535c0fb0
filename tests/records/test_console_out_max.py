"""The console's requests view shows what the client got: ``out/max`` never above the maximum.

A real syshaxd in front of simulator engines, the official openai client, and the console on
the control socket (Textual pilot): chat streams that ran to their length show ``N/N`` (they
showed ``N+1/N``), with the maximum the request asked for (``max_completion_tokens`` before
``max_tokens``); the engine's counts show without the ``~`` of a count or estimate of syshaxd's.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Callable
from typing import Any

from console.requestsview import out_of_max
from console.widgets.requests import RequestsScreen
from syshaxd.schema import RequestRecordModel
from tests.console.conftest import console_for, wait_for
from tests.console.test_real_daemon import socket_of
from tests.records._client import MESSAGES


def _screen_text(app: Any) -> str:
    svg = app.export_screenshot()
    lines = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return html.unescape("\n".join(re.sub(r"<[^>]+>", "", line) for line in lines)).replace("\xa0", " ")


def _traffic(client: Any) -> None:
    for n in (5, 9):
        with client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=n, stream=True,
                                            extra_body={"ignore_eos": True}) as chunks:
            for _ in chunks:
                pass
    # max_completion_tokens wins over max_tokens (vLLM's order): the maximum shown is 6.
    with client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_completion_tokens=6, stream=True,
                                        stream_options={"include_usage": True},
                                        extra_body={"ignore_eos": True, "max_tokens": 50}) as chunks:
        for _ in chunks:
            pass


async def test_out_of_max_shows_the_tokens_the_client_got(make_stack: Callable[..., Any]) -> None:
    stack = make_stack(policy="classic")
    app = console_for(socket_of(stack))
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await asyncio.to_thread(_traffic, stack.openai())
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, RequestsScreen), "the requests view")
        screen = app.screen
        assert isinstance(screen, RequestsScreen)
        await wait_for(pilot, lambda: len(screen.records) == 3, "three requests listed")
        text = _screen_text(app)
        # The engine's usage (syshaxd asked vLLM for it where the client did not): plain, no "~".
        for shown in ("5/5", "9/9", "6/6"):
            assert shown in text, text
        assert "6/50" not in text and "10/9" not in text and "6/5 " not in text and "~" not in text
        for record in screen.records:
            assert record.output_tokens is not None and record.output_tokens <= record.max_tokens
        usage = next(r for r in screen.records if r.output_tokens_source == "usage")
        assert usage.prompt_tokens_source == "usage" and f"~{usage.prompt_tokens}" not in text


def test_a_count_above_the_maximum_is_shown_as_a_fault() -> None:
    record = RequestRecordModel(request_id="r", arrival=0.0, kind="chat", stream=True, prompt_tokens=3,
                                max_tokens=8, output_tokens=9, output_tokens_source="counted", outcome="ok", e2e=1.0)
    cell = out_of_max(record)
    assert cell.plain == "~9/8!" and "red" in str(cell.style)
