"""``syshax demo --engines llama``: two real llama.cpp ``llama-server``s instead of the simulator.

One server plays the GPU, the other the CPU (both run on this machine's CPU, so the roles
are names, not speeds). They share a ``--slot-save-path`` so the ``llamacpp-slots``
handoff moves real KV caches between them. The binary and model are the ones
``make engines`` builds (``tools/build_engines.py``), or ``SYSHAX_LLAMA_SERVER`` /
``SYSHAX_LLAMA_MODEL``, or the ``--llama-server`` / ``--llama-model`` options.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from demo.ports import free_port
from demo.procs import Child, StartError, StopFlag, Supervisor, wait_until

#: Slots per server and total context: 2048 tokens per slot.
N_PARALLEL = 4
N_CTX = 8192
#: Planned prompt + output tokens per request: the demo's prompt words come out at up to
#: 1.6 tokens each under the tiny model's SentencePiece vocabulary (measured), plus the
#: chat template, and a slot holds 2048.
CONTEXT_LIMIT = 1150
BIND_ATTEMPTS = 3
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "build_engines.py"  # demo/llama.py


@dataclass(frozen=True)
class LlamaBuild:
    """The llama-server binary and the model file both servers load."""

    binary: Path
    model: Path


def find_build(binary: str | None = None, model: str | None = None) -> LlamaBuild:
    """The binary and model from the options, the environment, or ``make engines``' cache.

    Raises:
        StartError: either is missing; the message says how to build them.
    """
    binary = binary or os.environ.get("SYSHAX_LLAMA_SERVER")
    model = model or os.environ.get("SYSHAX_LLAMA_MODEL")
    if not (binary and model) and BUILD_SCRIPT.is_file():
        try:
            out = subprocess.run([sys.executable, str(BUILD_SCRIPT), "--print-paths"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
            paths = json.loads(out)
            binary, model = binary or paths.get("binary"), model or paths.get("model")
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    missing = [what for what, path in (("llama-server", binary), ("model", model)) if not path or not Path(path).is_file()]
    if missing or binary is None or model is None:
        raise StartError(
            f"no {' and no '.join(missing)} found for --engines llama: run `make engines` in the syshax "
            "checkout (builds both, once per machine), or give --llama-server PATH and --llama-model PATH"
        )
    return LlamaBuild(Path(binary), Path(model))


def start_server(
    sup: Supervisor, build: LlamaBuild, role: str, root: Path, model_name: str, stop: StopFlag | None = None,
    *, n_ctx: int = N_CTX,
) -> tuple[Child, str]:
    """Start one llama-server on a free port (retrying a lost port race); returns it and its URL.

    Its slots are saved under ``root/slots`` and it logs to ``root/logs/llama-<role>.log``;
    ``n_ctx`` is the context of all ``N_PARALLEL`` slots together.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    last: StartError | None = None
    for _ in range(BIND_ATTEMPTS):
        port = free_port()
        argv = [
            str(build.binary), "-m", str(build.model), "--alias", model_name,
            "--host", "127.0.0.1", "--port", str(port), "--metrics", "--slots",
            "-np", str(N_PARALLEL), "-c", str(n_ctx), "-t", "1",
            "--slot-save-path", str(root / "slots"), "--no-webui",
        ]
        child = sup.start(f"llama-server ({role})", argv, log_path=root / "logs" / f"llama-{role}.log", env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(functools.partial(_healthy, url), 60, f"llama-server ({role}) answered /health", child,
                       stop=stop)
            return child, url
        except StartError as exc:
            last = exc
            sup.stop(child)
    assert last is not None
    raise last


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
