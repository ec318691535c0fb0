"""``syshax advise`` with the shipped ``tiny`` profiles in front of two real llama-servers: the
profiles are not of these engines (another model, a GPU profile for the CPU role), so it says so
in one sentence, recommends nothing, exits 3 and ``--apply`` leaves the daemon as it was."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._traffic import SYSHAX
from sim.advise.cli import REFUSED
from tests.plugins.llama_stack import LlamaStack, LlamaStackFactory

pytestmark = [pytest.mark.llama, pytest.mark.timeout(600)]


@pytest.fixture
def served(llama_stack: LlamaStackFactory) -> Iterator[LlamaStack]:
    """The stack after a few completions from the official client."""
    stack = llama_stack()
    client = stack.openai()
    for i in range(4):
        client.completions.create(model="tiny", prompt=f"Count to {i + 3}:", max_tokens=8)
    yield stack


def _advise(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SYSHAX), "advise", "--socket", str(socket), *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_shipped_tiny_profiles_are_not_these_engines_and_advise_refuses(served: LlamaStack) -> None:
    before = {k: v for k, v in served.state().config.items() if k.startswith("decider.")}
    done = _advise(served.socket_path, "--gpu-profile", "tiny", "--cpu-profile", "tiny", "--apply")
    assert done.returncode == REFUSED, (done.stdout, done.stderr)
    verdict = [line for line in done.stdout.splitlines() if line.startswith("advise recommends nothing")]
    assert len(verdict) == 1, done.stdout
    assert "the profiles are not of these engines" in verdict[0]
    assert "profile tiny is of model tiny-sim but engine" in verdict[0] and "serves gpu-role" in verdict[0]
    assert "profile tiny is a gpu profile but engine" in verdict[0] and "plays the cpu role" in verdict[0]
    assert "nothing changed" in done.stdout
    after = {k: v for k, v in served.state().config.items() if k.startswith("decider.")}
    assert after == before
