"""One set of assertions about llama-server's API, run where they can catch our bugs.

A test takes the ``target`` fixture, parametrized indirectly with some of:

- ``llama-server``: a real llama-server, the reference. It proves the assertions are true
  of the real thing, so the other targets are held to what llama-server does, not to what
  someone remembered it doing.
- ``simulator``: ``python -m sim --dialect llamacpp`` with the same layout (4 slots of 1024
  tokens). Every sim-backed test of syshax trusts the simulator to answer like llama-server;
  here it has to.
- ``syshaxd``: a real syshaxd in front of two real llama-servers (``llama_stack``). The
  conductor rewrites llama-server requests (it always streams upstream and assembles
  non-streamed answers), so what the client sees must still be true.

``@run_on(LLAMA_SERVER, SIMULATOR, ...)`` parametrizes a test; ``xfail_simulator=`` marks the
simulator's run as a strict xfail naming the simulator change still missing (it fails once
the simulator is fixed, so the mark is removed then).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.plugins.llama import N_CTX, N_PARALLEL, LlamaBuild, LlamaServer, llama_servers
from tests.plugins.llama_stack import llama_stacks

#: The model name both the real server (``--alias``) and the simulator (``--served-model-name``) answer with.
ALIAS = "twin"
LLAMA_SERVER, SIMULATOR, SYSHAXD = "llama-server", "simulator", "syshaxd"
ALL = (LLAMA_SERVER, SIMULATOR, SYSHAXD)
#: The engines alone, for what syshaxd answers itself or does not pass on (/slots, /metrics, bad JSON).
ENGINES = (LLAMA_SERVER, SIMULATOR)
#: Simulated time runs this many times faster than the wall clock (the sim fixtures' default).
SIM_SPEED = 20.0


@dataclass(frozen=True)
class Target:
    """Where a test sends its requests, and what it may expect there."""

    kind: str
    #: Base URL of the OpenAI routes.
    url: str
    #: The llama-server(s) or simulated engine behind ``url`` (``/metrics``, ``/slots``, slot actions).
    engines: tuple[str, ...]
    n_parallel: int
    n_ctx: int
    #: What an answer's ``model`` may say (llama-server echoes its alias, whatever was asked).
    models: frozenset[str]

    @property
    def engine(self) -> str:
        """The one engine of a direct target (llama-server or simulator)."""
        assert len(self.engines) == 1, f"{self.kind} has {len(self.engines)} engines"
        return self.engines[0]

    @property
    def slot_n_ctx(self) -> int:
        """Tokens per slot."""
        return self.n_ctx // self.n_parallel

    def http(self, base: str | None = None, timeout: float = 60) -> httpx.AsyncClient:
        """A raw client for the details the openai client hides (``base`` defaults to ``url``)."""
        return httpx.AsyncClient(base_url=base or self.url, timeout=timeout)

    def openai(self) -> Any:
        """The official async OpenAI client on ``url`` (no retries)."""
        import openai

        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)


def run_on(*kinds: str, xfail_simulator: str | None = None) -> pytest.MarkDecorator:
    """Run the test once per target kind (``xfail_simulator``: the simulator change it waits for)."""
    params = []
    for kind in kinds:
        marks = []
        if kind == SIMULATOR and xfail_simulator:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError,
                                           reason=f"simulator change needed: {xfail_simulator}"))
        params.append(pytest.param(kind, id=kind, marks=marks))
    return pytest.mark.parametrize("target", params, indirect=True)


def _server_target(server: LlamaServer) -> Target:
    return Target(LLAMA_SERVER, server.url, (server.url,), server.n_parallel, server.n_ctx, frozenset({ALIAS}))


class _Targets:
    """Targets started on first use and kept for a module (see :func:`target`)."""

    def __init__(self, build: LlamaBuild, tmp: Path, stack: ExitStack) -> None:
        self.build, self.tmp, self.stack = build, tmp, stack
        self.started: dict[str, Target] = {}

    def get(self, kind: str) -> Target:
        if kind not in self.started:
            self.started[kind] = self.stack.enter_context(start_target(kind, self.build, self.tmp / kind))
        return self.started[kind]


@contextmanager
def start_target(kind: str, build: LlamaBuild, tmp: Path) -> Iterator[Target]:
    """The place ``kind`` names (see the module docstring), stopped on the way out."""
    if kind == LLAMA_SERVER:
        with llama_servers(build) as servers:
            yield _server_target(servers(extra_args=("--alias", ALIAS)))
    elif kind == SIMULATOR:
        from sim.launch import start_engine

        slots = tmp / "sim-slots"
        slots.mkdir(parents=True)
        with start_engine("tiny", dialect="llamacpp", speed=SIM_SPEED, parallel=N_PARALLEL, ctx_size=N_CTX,
                          slot_save_path=slots, served_model_name=ALIAS) as (_, engine):
            yield Target(SIMULATOR, engine.url, (engine.url,), N_PARALLEL, N_CTX, frozenset({ALIAS}))
    elif kind == SYSHAXD:
        with llama_stacks(build) as stacks:
            stack = stacks()
            yield Target(SYSHAXD, stack.url, (stack.gpu.url, stack.cpu.url), N_PARALLEL, N_CTX,
                         frozenset({"gpu-role", "cpu-role"}))
    else:
        raise ValueError(f"unknown target {kind!r}")


@pytest.fixture(scope="module")
def _module_targets(llama_build: LlamaBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Targets]:
    with ExitStack() as stack:
        yield _Targets(llama_build, tmp_path_factory.mktemp("targets"), stack)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """The place named by the test's parameter (see the module docstring).

    A module's tests share one of each kind (a llama-server, a syshaxd pair takes seconds to
    start): a test must not depend on what the others sent, so prompts a cache could have
    seen are the test's own. A test (or module) marked ``fresh_target`` gets its own, stopped
    at its teardown: slot and metrics tests, whose state the others would disturb.
    """
    kind = request.param
    if request.node.get_closest_marker("fresh_target") is None:
        yield request.getfixturevalue("_module_targets").get(kind)
        return
    with start_target(kind, request.getfixturevalue("llama_build"), tmp_path) as found:
        yield found
