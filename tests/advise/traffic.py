"""Open-loop traffic through a stack and ``syshax advise`` run against it, for the advise tests."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from syshaxd.schema import AdviceModel
from tests.plugins.stack import Stack

SYSHAX = Path(sys.executable).parent / "syshax"


@dataclass(frozen=True)
class Workload:
    """Poisson arrivals of streamed completions with token-id prompts (so the daemon counts them exactly)."""

    requests: int
    rate: float  # requests/s
    prompt: tuple[int, int]  # uniform range of prompt tokens
    max_tokens: tuple[int, int]  # uniform range; the engine may stop earlier
    seed: int = 7


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


async def _drive(stack: Stack, load: Workload) -> list[bool]:
    rng = random.Random(load.seed)
    loop = asyncio.get_running_loop()
    start, at, tasks = loop.time(), 0.0, []
    async with httpx.AsyncClient(base_url=stack.url, timeout=120, limits=httpx.Limits(max_connections=500)) as client:
        for _ in range(load.requests):
            at += rng.expovariate(load.rate)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            prompt = [rng.randrange(100, 30000) for _ in range(rng.randint(*load.prompt))]
            tasks.append(asyncio.create_task(_one(client, prompt, rng.randint(*load.max_tokens))))
        return list(await asyncio.gather(*tasks))


def drive(stack: Stack, load: Workload) -> list[bool]:
    """Send the workload open loop (arrivals do not wait for answers); whether each request succeeded."""
    return asyncio.run(_drive(stack, load))


def advise(stack: Stack, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``syshax advise`` against the stack's control socket."""
    socket = stack.tmp / "run" / "control.sock"
    return subprocess.run([str(SYSHAX), "advise", "--socket", str(socket), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def advice_of(stack: Stack, *args: str) -> AdviceModel:
    """``syshax advise --json``: the advice it printed (it must succeed)."""
    done = advise(stack, "--json", *args)
    assert done.returncode == 0, done.stderr
    return AdviceModel.model_validate_json(done.stdout)
