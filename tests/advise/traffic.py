"""Open-loop traffic through a stack and ``syshax advise`` run against it, for the advise tests."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

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


async def _one(client: openai.AsyncOpenAI, prompt: list[int], max_tokens: int) -> bool:
    try:
        stream = await client.completions.create(model="ds-32b", prompt=prompt, max_tokens=max_tokens, stream=True)
        async for _ in stream:
            pass
    except openai.APIError:
        return False
    return True


async def _drive(stack: Stack, load: Workload) -> list[bool]:
    rng = random.Random(load.seed)
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0, timeout=120,
                                http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=500)))
    loop = asyncio.get_running_loop()
    start, at, tasks = loop.time(), 0.0, []
    try:
        for _ in range(load.requests):
            at += rng.expovariate(load.rate)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            prompt = [rng.randrange(100, 30000) for _ in range(rng.randint(*load.prompt))]
            tasks.append(asyncio.create_task(_one(client, prompt, rng.randint(*load.max_tokens))))
        return list(await asyncio.gather(*tasks))
    finally:
        await client.close()


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
