"""The advice view with service classes: which class the CPU should serve, and a line per class."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx

from console.widgets.requests import AdviceScreen
from tests.console.conftest import console_for, wait_for
from tests.console.test_real_daemon import socket_of
from tests.console.test_requests_view import _screen_text

VERDICT = ("Serve batch on the CPU: 97% of batch runs there (whole or split) and meets its targets on 20 of 20 "
           "requests (TTFT p99 21.0 s of 60 s).")


def _class(requests: int, met: int, ttft_p99: float, gpu: float, cpu: float, split: float) -> dict[str, Any]:
    return {"requests": requests, "completed": requests, "met": met, "goodput": met / 60.0, "ttft_p99": ttft_p99,
            "refused": 0, "gpu_share": gpu, "cpu_share": cpu, "split_share": split}


ADVICE = {
    "made_at": 1_700_000_000.0, "requests": 60, "window_s": 60.0, "profiles": {"gpu": "gpu-l4-qwen3moe"},
    "summary": "The CPU helps: the current setting is predicted to serve 0.95 requests/s within the targets.",
    "recommended": 1, "cpu_classes": ["batch"], "cpu_verdict": VERDICT,
    "classes": {"interactive": {"ttft": 5.0, "tpot": 0.2, "priority": 0},
                "batch": {"ttft": 60.0, "tpot": 1.0, "priority": 1}},
    "actual_classes": {"interactive": _class(40, 38, 4.2, 1.0, 0.0, 0.0), "batch": _class(20, 20, 18.0, 0.1, 0.0, 0.9)},
    "options": [
        {"label": "gpu-priority", "goodput": 0.7, "throughput": 1.0, "classes": {
            "interactive": _class(40, 30, 9.0, 1.0, 0.0, 0.0), "batch": _class(20, 12, 70.0, 1.0, 0.0, 0.0)}},
        {"label": "adaptive, gpu batch 256 (engine's), cpu batch 20, auto-PD off", "goodput": 0.95, "throughput": 1.0,
         "current": True, "classes": {"interactive": _class(40, 37, 3.5, 1.0, 0.0, 0.0),
                                      "batch": _class(20, 20, 21.0, 0.03, 0.17, 0.8)}},
    ],
}


async def test_the_advice_view_says_which_class_the_cpu_should_serve_and_shows_each_class(
        make_stack: Callable[..., Any]) -> None:
    stack = make_stack(policy="adaptive")
    path = socket_of(stack)
    transport = httpx.AsyncHTTPTransport(uds=str(path))
    async with httpx.AsyncClient(transport=transport, base_url="http://syshaxd") as control:
        (await control.post("/v1/advice", json=ADVICE)).raise_for_status()
    app = console_for(path)
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AdviceScreen), "the advice view")
        await wait_for(pilot, lambda: "Serve batch on the CPU" in _screen_text(app), "the class verdict")
        text = _screen_text(app)
        # interactive runs first (priority 0), so its line comes first; the recommended option's figures
        chat = re.search(r"interactive\s+recommended: 37/40 within its targets, TTFT p99 3.50 s of 5.00 s", text)
        batch = re.search(r"batch\s+recommended: 20/20 within its targets, TTFT p99 21.00 s of 60.00 s", text)
        assert chat and batch and chat.start() < batch.start(), text
        assert "GPU 3% · CPU 17% · split 80%" in text
        assert "happened: 20/20, TTFT p99 18.00 s" in text
