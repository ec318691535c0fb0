"""The simulator's HTTP server sets TCP_NODELAY on every connection it accepts.

Without it a small write (one SSE chunk) can wait for the client's delayed ACK. asyncio
sets the option on an accepted socket only when the listening socket was created with
``IPPROTO_TCP`` (``sim.serve.bind`` does); this test looks at the server's side of a
live connection, so it fails if that is undone.
"""

from __future__ import annotations

import asyncio
import socket

import httpx

from sim.engine import EngineOptions, SimEngine
from sim.profile import load_profile
from sim.serve import bind, make_server


async def test_every_accepted_connection_has_tcp_nodelay() -> None:
    engine = SimEngine(EngineOptions(load_profile("tiny")))
    listener = bind("127.0.0.1", 0)
    port = listener.getsockname()[1]
    server = make_server(engine)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            assert not task.done(), "the server did not start"
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient() as first, httpx.AsyncClient() as second:
            for client in (first, second):
                assert (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200
            accepted = [c.transport.get_extra_info("socket") for c in server.server_state.connections]
            assert len(accepted) == 2
            assert [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted] == [1, 1]
    finally:
        server.should_exit = True
        await task
