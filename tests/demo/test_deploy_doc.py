"""docs/deploy.md's "Rehearse it with the simulator" works, run block by block as a person would.

The fenced blocks marked ```` ```sh rehearse ```` are run in order in one bash session
(``set -euo pipefail``), from the repository root, with the venv on PATH, free ports in
GPU_PORT/CPU_PORT/API_PORT and TMPDIR inside pytest's temporary directory. The session
runs in its own process group, which the test kills at the end whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
BLOCK = re.compile(r"^```sh rehearse\n(.*?)^```", re.S | re.M)

pytestmark = pytest.mark.timeout(240)


def rehearsal_blocks(text: str) -> list[str]:
    """The rehearsal's shell blocks, in document order."""
    return [m.group(1) for m in BLOCK.finditer(text)]


def test_the_doc_has_a_complete_rehearsal() -> None:
    blocks = rehearsal_blocks(DOC.read_text(encoding="utf-8"))
    script = "\n".join(blocks)
    assert len(blocks) >= 6
    # The steps of the real deployment each have their stand-in.
    for needle in ("syshax numa", "syshax sim pair", "syshax config", "syshax check-config", "syshaxd",
                   "syshax status", "syshax set", "kill -HUP", "kill -TERM", 'rm -rf "$WORK"'):
        assert needle in script, needle


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="the rehearsal uses curl and jq")
def test_rehearsal_runs_step_by_step(tmp_path: Path, short_tmp: Path) -> None:
    blocks = rehearsal_blocks(DOC.read_text(encoding="utf-8"))
    parts = ["set -euo pipefail"]
    for n, block in enumerate(blocks, 1):
        parts += [f"echo '=== rehearsal block {n}'", block]
    parts.append("echo '=== rehearsal done'")
    # The rehearsal's `mktemp -d` holds the control socket: a short $TMPDIR keeps its path
    # under the 107 bytes a Unix socket allows, wherever pytest puts tmp_path.
    scratch = short_tmp
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        TMPDIR=str(scratch), XDG_RUNTIME_DIR=str(tmp_path / "xdg"), XDG_STATE_HOME=str(tmp_path / "state"),
        GPU_PORT=str(free_port()), CPU_PORT=str(free_port()), API_PORT=str(free_port()),
        COLUMNS="140", PYTHONUNBUFFERED="1",
    )
    proc = subprocess.Popen(["bash", "-c", "\n".join(parts)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=200)
    finally:
        # Whatever the script left running (a failed step stops it early) goes with its group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    text = out.decode(errors="replace")
    failed_in = re.findall(r"=== rehearsal block (\d+)", text)
    assert proc.returncode == 0, f"block {failed_in[-1] if failed_in else '?'} failed:\n{text[-4000:]}"
    assert "=== rehearsal done" in text
    # What a person would look at after each step:
    assert "ds-32b" in text  # both engines serve the model
    assert re.search(r"gpu0\s.*up", text) and re.search(r"cpu0\s.*up", text), text[-4000:]
    assert re.search(r"^660 \S+ .*control\.sock$", text, re.M)  # socket mode
    assert "without the key: 401" in text
    answer = re.search(r"^answer: (.+)$", text, re.M)
    assert answer and answer.group(1).strip() and answer.group(1) != "null"
    assert re.search(r'^syshax_requests_total\{.*outcome="ok".*\} [1-9]', text, re.M)
    assert "cpu_max_batch_size: 8" in text  # saved to the overrides file
    assert "control socket removed" in text
    assert list(scratch.iterdir()) == []  # the scratch directory is gone
