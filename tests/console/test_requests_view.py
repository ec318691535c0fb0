"""The requests view and the advice view against a real syshaxd with simulator engines."""

from __future__ import annotations

import asyncio
import html
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from console.widgets.requests import AdviceScreen, RequestDetail, RequestsScreen
from tests.console.conftest import console_for, wait_for
from tests.console.test_real_daemon import chat, socket_of

ADVICE = {"made_at": 1_700_000_000.0, "requests": 120, "window_s": 60.0, "profiles": {"gpu": "tiny", "cpu": "tiny"},
          "summary": "The CPU cannot help this traffic: run GPU-only.",
          "current_error": {"ttft_p50": 0.08, "throughput": -0.02}, "recommended": 1,
          "options": [{"label": "classic, gpu batch 8 (engine's), cpu batch 20", "goodput": 1.5, "throughput": 2.0,
                       "ttft_p50": 0.2, "tpot_p99": 0.0032, "output_tps": 41.5, "cpu_share": 0.3, "current": True,
                       "tied": True},
                      {"label": "gpu-only", "goodput": 1.9, "throughput": 2.0, "ttft_p50": 0.1, "ttft_p99": 1.5,
                       "cpu_share": 0.0}]}


def _screen_text(app: Any) -> str:
    """What the screen shows, as a person reads it: the text of an SVG screenshot."""
    svg = app.export_screenshot()
    lines = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return html.unescape("\n".join(re.sub(r"<[^>]+>", "", line) for line in lines)).replace("\xa0", " ")


async def test_requests_view_lists_what_the_daemon_served_and_opens_a_decision(
        make_stack: Callable[..., Any]) -> None:
    stack = make_stack(policy="classic")
    path = socket_of(stack)
    app = console_for(path)
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await asyncio.to_thread(chat, stack.url, 4)
        batch = await asyncio.to_thread(
            httpx.post, f"{stack.url}/v1/chat/completions", headers={"x-syshax-class": "batch"},
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=30)
        assert batch.status_code == 200
        # The overview's conductor panel: the line and the goodput of each class.
        await wait_for(pilot, lambda: app.state is not None and {"interactive", "batch"} <= set(
            app.state.conductor.classes), "both classes counted")
        # The counts reach the screen at its next redraw (later on a busy machine).
        await wait_for(pilot, lambda: re.search(r"batch\s+0\s+1\s*/1\b", _screen_text(app)) is not None,
                       "the batch line drawn")
        overview = _screen_text(app)
        assert "good/done/min" in overview and re.search(r"batch\s+0\s+1\s*/1\b", overview)
        assert re.search(r"interactive\s+0\s+4\s*/4\b", overview)
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, RequestsScreen), "the requests view")
        screen = app.screen
        assert isinstance(screen, RequestsScreen)
        await wait_for(pilot, lambda: len(screen.records) == 5, "five requests listed")
        await wait_for(pilot, lambda: "the last 5 finished requests" in _screen_text(app), "the list drawn")
        text = _screen_text(app)
        assert "the last 5 finished requests" in text and "(0 not ok)" in text
        assert "class" in text and re.search(r"batch\s*✓", text) and len(re.findall(r"interactive\s*✓", text)) == 4
        newest = screen.records[0]
        assert newest.arrival >= screen.records[-1].arrival
        assert newest.decision is not None and newest.decision.engine is not None
        assert f"{newest.decision.engine}/whole" in text and newest.request_id[:12] in text

        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RequestDetail), "one request opened")
        await wait_for(pilot, lambda: "the engines as the policy saw them" in _screen_text(app), "the request drawn")
        detail = _screen_text(app)
        assert newest.request_id in detail and "the engines as the policy saw them" in detail
        assert "gpu0 (gpu)" in detail and "cpu0 (cpu)" in detail
        assert f"because: {newest.decision.reason}" in detail and "cpu_max_batch_size=20" in detail
        assert re.search(r"class\s+batch\s+targets TTFT 60\.00 s, TPOT 1\.00 s\s+met", detail), detail
        assert re.search(r"cost\s+\d\.\d{3} GPU-s", detail)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, RequestsScreen), "back to the list")
        # New traffic shows up while the view is open (it refreshes itself).
        await asyncio.to_thread(chat, stack.url, 2)
        await wait_for(pilot, lambda: len(screen.records) == 7, "seven requests listed")
        if os.environ.get("SYSHAX_SCREENSHOTS"):
            app.save_screenshot(str(Path(os.environ["SYSHAX_SCREENSHOTS"]) / "console-requests.svg"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, RequestsScreen), "closed")


async def test_advice_view_says_how_to_get_advice_then_shows_the_latest(make_stack: Callable[..., Any]) -> None:
    stack = make_stack(policy="classic")
    path = socket_of(stack)
    app = console_for(path)
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AdviceScreen), "the advice view")
        await wait_for(pilot, lambda: "No advice yet" in _screen_text(app), "no advice yet")
        await pilot.press("escape")
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        async with httpx.AsyncClient(transport=transport, base_url="http://syshaxd") as control:
            (await control.post("/v1/advice", json=ADVICE)).raise_for_status()
        await pilot.press("a")
        await wait_for(pilot, lambda: "gpu-only" in _screen_text(app), "the advice shown")
        text = _screen_text(app)
        assert "The CPU cannot help this traffic" in text and "120 requests over 60 s" in text
        assert "TTFT p50 +8%" in text and "throughput -2%" in text  # names an operator reads
        assert "ttft_p50" not in text and "output_tps" not in text
        assert "200 ms" in text and "3.2 ms" in text and "1.50 s" in text  # ms below a second
        assert "output tokens/s" in text and "41.5" in text
        assert "now" in text and "→" in text and "= now" in text  # the current setting ties
        if os.environ.get("SYSHAX_SCREENSHOTS"):
            app.save_screenshot(str(Path(os.environ["SYSHAX_SCREENSHOTS"]) / "console-advice.svg"))
