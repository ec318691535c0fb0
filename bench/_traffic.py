"""Open-loop traffic through a running syshaxd, and ``syshax advise`` run against it.

The accuracy benchmark's third stage and the advise tests drive their daemons with this
one driver, so the window the benchmark judges is the window the tests record.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

SYSHAX = Path(sys.executable).parent / "syshax"


@dataclass(frozen=True)
class Workload:
    """Poisson arrivals of streamed completions with token-id prompts (so the daemon counts them exactly)."""

    requests: int
    rate: float  # requests/s
    prompt: tuple[int, int]  # uniform range of prompt tokens
    max_tokens: tuple[int, int]  # uniform range; the engine may stop earlier
    seed: int = 7
    id_high: int = 30000  # prompt token ids are drawn below this (a small model's vocabulary)


class AdviseError(Exception):
    """``syshax advise`` failed; the message is what it printed on stderr."""


async def _one(client: httpx.AsyncClient, prompt: list[int], max_tokens: int) -> bool:
    body = {"model": "ds-32b", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    try:
        # The bytes are drained, not parsed: a client parsing every event would take the
        # CPU the daemon and the engines need on a small machine, and bend what they measure.
        async with client.stream("POST", "/v1/completions", json=body) as answer:
            async for _ in answer.aiter_raw():
                pass
            return answer.status_code == 200
    except httpx.HTTPError:
        return False


async def _drive(url: str, load: Workload, done: Callable[[], None] | None) -> list[bool]:
    rng = random.Random(load.seed)
    loop = asyncio.get_running_loop()
    start, at, tasks = loop.time(), 0.0, []
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=500)) as client:
        for _ in range(load.requests):
            at += rng.expovariate(load.rate)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            prompt = [rng.randrange(100, load.id_high) for _ in range(rng.randint(*load.prompt))]
            task = asyncio.create_task(_one(client, prompt, rng.randint(*load.max_tokens)))
            if done is not None:
                task.add_done_callback(lambda _: done())
            tasks.append(task)
        return list(await asyncio.gather(*tasks))


def drive(url: str, load: Workload, done: Callable[[], None] | None = None) -> list[bool]:
    """Send the workload to the daemon at ``url`` open loop (arrivals do not wait for answers).

    Args:
        url: the daemon's API, ``http://host:port``.
        load: what to send.
        done: called as each request finishes (a progress bar's advance).

    Returns:
        Whether each request succeeded, in arrival order.
    """
    return asyncio.run(_drive(url, load, done))


def advise(socket: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``syshax advise`` against the daemon behind the control ``socket``."""
    return subprocess.run([str(SYSHAX), "advise", "--socket", str(socket), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
