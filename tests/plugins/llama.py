"""Real llama.cpp `llama-server` processes for tests, with the tiny model from `make engines`.

The binary and model live in the per-machine cache that `tools/build_engines.py` fills.
`llama_stack` (tests/plugins/llama_stack.py) puts a real `syshaxd` in front of a pair of them.
When they are missing the fixtures FAIL (not skip) and say to run `make engines`: a
silent skip would let a broken build pass `make test`.
Set SYSHAX_LLAMA_SERVER / SYSHAX_LLAMA_MODEL to test another binary or model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.plugins.ports import free_port
from tools.build_engines import engine_paths

N_PARALLEL = 4
N_CTX = 4096
_START_TIMEOUT = 60.0
BIND_ATTEMPTS = 3


@dataclass(frozen=True)
class LlamaBuild:
    """The llama-server binary and tiny model the fixtures run."""

    binary: Path
    model: Path


@dataclass
class LlamaServer:
    """One running llama-server on a loopback port."""

    proc: subprocess.Popen[bytes]
    port: int
    slot_dir: Path
    log_path: Path
    model: Path
    n_parallel: int
    n_ctx: int
    args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Base URL, no trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server logged (for failure messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate, then kill if it does not exit promptly."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def resolve_build() -> LlamaBuild:
    """Find the binary and model, or fail the test with what to run."""
    paths = engine_paths()
    binary = Path(os.environ.get("SYSHAX_LLAMA_SERVER") or paths.binary)
    model = Path(os.environ.get("SYSHAX_LLAMA_MODEL") or paths.model)
    missing = [str(p) for p in (binary, model) if not p.is_file()]
    if missing:
        pytest.fail(
            "llama-server or its tiny model is not built ("
            + ", ".join(missing)
            + "): run `make engines` (or `.venv/bin/python tools/build_engines.py`) first",
            pytrace=False,
        )
    return LlamaBuild(binary, model)


def _wait_healthy(server: LlamaServer, timeout: float) -> bool:
    """True once /health says 200; False if the process died (e.g. lost the port race)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False
        try:
            if httpx.get(server.url + "/health", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(
        f"llama-server on {server.url} not healthy in {timeout}s:\n{server.log_tail()}"
    )


def start_llama_server(
    build: LlamaBuild,
    slot_dir: Path,
    log_dir: Path,
    *,
    n_parallel: int = N_PARALLEL,
    n_ctx: int = N_CTX,
    extra_args: tuple[str, ...] = (),
    slot_save: bool = True,
) -> LlamaServer:
    """Start llama-server on a free loopback port and wait until /health is 200.

    ``slot_save=False`` leaves out ``--slot-save-path`` (slot actions then answer 501).
    """
    # LLAMA_ARG_* variables would silently change flags under the test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    for attempt in range(BIND_ATTEMPTS):
        port = free_port()
        log_path = log_dir / f"llama-server-{port}.log"
        args = [
            str(build.binary), "-m", str(build.model), "--host", "127.0.0.1",
            "--port", str(port), "--metrics", "--slots", "-np", str(n_parallel),
            "-c", str(n_ctx), "-t", "1",
            *(("--slot-save-path", str(slot_dir)) if slot_save else ()),
            "--no-webui", *extra_args,
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        server = LlamaServer(proc, port, slot_dir, log_path, build.model, n_parallel, n_ctx, args)
        try:
            healthy = _wait_healthy(server, _START_TIMEOUT)
        except BaseException:
            server.stop()
            raise
        if healthy:
            return server
        # Exited before answering: most likely another process took the port; try a new one.
        if attempt == BIND_ATTEMPTS - 1:
            raise RuntimeError(
                f"llama-server exited with {proc.returncode} before answering:\n{server.log_tail()}"
            )
    raise AssertionError("unreachable")


LlamaFactory = Callable[..., LlamaServer]


@pytest.fixture(scope="session")
def llama_build() -> LlamaBuild:
    """The built llama-server and tiny model (fails with a hint when missing)."""
    return resolve_build()


@contextmanager
def llama_servers(llama_build: LlamaBuild) -> Iterator[LlamaFactory]:
    """Start llama-servers on demand: `factory(slot_dir=, model=, n_parallel=, n_ctx=, extra_args=, slot_save=)`.

    All stop on the way out. Servers started without a slot_dir share one fresh slot-save
    directory, which is what the `llamacpp-slots` handoff needs.
    """
    work = Path(tempfile.mkdtemp(prefix="syshax-llama-"))
    shared_slots = work / "slots"
    shared_slots.mkdir()
    servers: list[LlamaServer] = []

    def start(
        slot_dir: Path | None = None,
        *,
        model: Path | None = None,
        n_parallel: int = N_PARALLEL,
        n_ctx: int = N_CTX,
        extra_args: tuple[str, ...] = (),
        slot_save: bool = True,
    ) -> LlamaServer:
        build = LlamaBuild(llama_build.binary, model) if model else llama_build
        server = start_llama_server(
            build, slot_dir or shared_slots, work,
            n_parallel=n_parallel, n_ctx=n_ctx, extra_args=extra_args, slot_save=slot_save,
        )  # fmt: skip
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def llama_factory(llama_build: LlamaBuild) -> Iterator[LlamaFactory]:
    """:func:`llama_servers` for one test."""
    with llama_servers(llama_build) as start:
        yield start


@pytest.fixture
def llama_server(llama_factory: LlamaFactory) -> LlamaServer:
    """One real llama-server (-np 4, -c 4096, -t 1, metrics and slots on)."""
    return llama_factory()


@pytest.fixture
def llama_pair(llama_factory: LlamaFactory) -> tuple[LlamaServer, LlamaServer]:
    """Two real llama-servers sharing one slot-save directory (prefill side, decode side)."""
    return llama_factory(), llama_factory()
