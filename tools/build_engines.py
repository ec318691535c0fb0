"""Build llama.cpp's `llama-server` from a pinned PyPI sdist, plus a tiny test model.

Everything lands in a per-version cache directory outside the repository
(`${XDG_CACHE_HOME:-~/.cache}/syshax/llama.cpp-<version>/`), so the ~7 minute build
happens once per machine. Only a package registry is needed: the sdist of
llama-cpp-python vendors llama.cpp's full source, and the CMake flags below keep the
build from downloading anything else.

    python tools/build_engines.py                # build if needed, then print a summary
    python tools/build_engines.py --if-missing   # do nothing when the binary already runs
    python tools/build_engines.py --print-paths  # JSON for scripts and tests, no build
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

if __package__ in (None, ""):
    # Run as a script (`python tools/build_engines.py`): make `tools` importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
VOCAB = "ggml-vocab-llama-spm.gguf"

# CPU-only, portable, and offline: OpenSSL and the web UI would otherwise fetch things.
# LLAMA_CURL no longer exists in this llama.cpp (it only warns), so it is not passed.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
)

_PERCENT = re.compile(r"^\[\s*(\d+)%\]\s*(.*)")


class BuildError(Exception):
    """A user-facing build failure; the message says what to look at."""


@dataclass(frozen=True)
class EnginePaths:
    """Where the cached build and model live for one pinned version."""

    root: Path
    version: str = VERSION

    @property
    def download_dir(self) -> Path:
        """Where pip puts the sdist."""
        return self.root / "dl"

    @property
    def source_dir(self) -> Path:
        """The vendored llama.cpp source tree."""
        return self.root / "src" / f"llama_cpp_python-{self.version}" / "vendor" / "llama.cpp"

    @property
    def build_dir(self) -> Path:
        """CMake's build tree (kept for incremental rebuilds)."""
        return self.root / "build"

    @property
    def binary(self) -> Path:
        """The installed llama-server."""
        return self.root / "bin" / "llama-server"

    @property
    def model(self) -> Path:
        """The tiny random-weight GGUF."""
        from tools.tiny_gguf import GENERATOR_VERSION

        return self.root / "models" / f"syshax-tiny-llama-g{GENERATOR_VERSION}.gguf"

    @property
    def vocab(self) -> Path:
        """The vocab-only GGUF the tiny model copies its tokenizer from."""
        return self.source_dir / "models" / VOCAB

    @property
    def log(self) -> Path:
        """The full cmake output of the last build."""
        return self.root / "build.log"

    @property
    def record(self) -> Path:
        """JSON facts about the last successful build (time, flags)."""
        return self.root / "build.json"

    def as_json(self) -> dict[str, str]:
        """The paths scripts and tests need."""
        return {
            "version": self.version,
            "cache_dir": str(self.root),
            "binary": str(self.binary),
            "model": str(self.model),
            "vocab": str(self.vocab),
            "log": str(self.log),
        }


def engine_paths(version: str = VERSION) -> EnginePaths:
    """The cache layout for version, under $XDG_CACHE_HOME (default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return EnginePaths(Path(base) / "syshax" / f"llama.cpp-{version}", version)


def binary_version(binary: Path) -> str | None:
    """`llama-server --version` first line, or None when it does not run."""
    if not binary.is_file():
        return None
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip()
    line = next((ln for ln in text.splitlines() if ln.startswith("version:")), "")
    return line.removeprefix("version:").strip() if out.returncode == 0 and line else None


@contextmanager
def build_lock(paths: EnginePaths, console: Console) -> Iterator[None]:
    """Hold an exclusive lock so two concurrent runs do not both build."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.root / ".lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with console.status("another build holds the lock; waiting for it to finish"):
                fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def download(paths: EnginePaths, console: Console) -> Path:
    """Fetch the sdist with pip (cached); return the archive."""
    name = f"llama_cpp_python-{paths.version}.tar.gz"
    archive = paths.download_dir / name
    if archive.is_file():
        return archive
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "-d", str(paths.download_dir),
        f"{PACKAGE}=={paths.version}",
    ]  # fmt: skip
    with console.status(f"downloading {PACKAGE}=={paths.version} sdist with pip"):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0 or not archive.is_file():
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise BuildError(f"pip could not download {PACKAGE}=={paths.version}:\n{tail}")
    return archive


def extract(paths: EnginePaths, archive: Path, console: Console) -> None:
    """Unpack only vendor/llama.cpp from the sdist (idempotent)."""
    if (paths.source_dir / "CMakeLists.txt").is_file():
        return
    top = f"llama_cpp_python-{paths.version}"
    prefix = f"{top}/vendor/llama.cpp/"
    # The submodule's git dir lives in the top-level .git; llama.cpp's CMake reads the
    # build number and commit from it (without it: "build 0, commit unknown").
    wanted = (prefix, f"{top}/.git/modules/vendor/llama.cpp/")
    dest = paths.root / "src"
    with console.status("extracting vendor/llama.cpp"), tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        if not any(m.name.startswith(prefix) for m in members):
            raise BuildError(f"{archive} has no {prefix}: not the expected sdist")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # Python < 3.11.4 has no extraction filters
            tar.extractall(dest, members=members)  # noqa: S202


def _stream_build(cmd: list[str], log: IO[str], console: Console) -> int:
    """Run cmake --build, log everything, show a bar driven by its [NN%] lines."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]llama-server[/]"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TextColumn("[dim]{task.fields[step]}", justify="left"),
    )
    last_printed = -10
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("build", total=100, step="starting")
        for line in proc.stdout:
            log.write(line)
            match = _PERCENT.match(line.strip())
            if not match:
                continue
            pct, step = int(match.group(1)), match.group(2)
            short = step.rsplit("/", 1)[-1][:48]
            progress.update(task, completed=pct, step=short)
            # Without a terminal the bar is invisible: log a line every 10% instead.
            if not console.is_terminal and pct >= last_printed + 10:
                console.print(f"[{pct:3d}%] {short}")
                last_printed = pct
        rc = proc.wait()
        if rc == 0:
            progress.update(task, completed=100, step="done")
    return rc


def build(paths: EnginePaths, jobs: int, console: Console) -> float:
    """Configure and build the llama-server target; install it; return seconds taken."""
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed (apt-get install cmake g++)")
    start = time.monotonic()
    paths.build_dir.mkdir(parents=True, exist_ok=True)
    configure = ["cmake", "-S", str(paths.source_dir), "-B", str(paths.build_dir), *CMAKE_FLAGS]
    compile_ = ["cmake", "--build", str(paths.build_dir), "--target", "llama-server", f"-j{jobs}"]
    # Line-buffered so `tail -f` on the log follows the build.
    with open(paths.log, "w", buffering=1) as log:
        with console.status("configuring with cmake"):
            log.write("$ " + " ".join(configure) + "\n")
            log.flush()
            out = subprocess.run(configure, stdout=log, stderr=subprocess.STDOUT, check=False)
        if out.returncode != 0:
            raise BuildError(f"cmake configure failed; see {paths.log}")
        log.write("$ " + " ".join(compile_) + "\n")
        log.flush()
        rc = _stream_build(compile_, log, console)
    if rc != 0:
        tail = "\n".join(paths.log.read_text(errors="replace").splitlines()[-20:])
        raise BuildError(f"the build failed (exit {rc}); last lines of {paths.log}:\n{tail}")
    built = paths.build_dir / "bin" / "llama-server"
    if not built.is_file():
        raise BuildError(f"the build finished but {built} is missing; see {paths.log}")
    paths.binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.binary.with_name("llama-server.part")
    shutil.copy2(built, tmp)
    tmp.replace(paths.binary)
    return time.monotonic() - start


def ensure_model(paths: EnginePaths, console: Console) -> bool:
    """Generate the tiny model if missing; return True when it was (re)generated."""
    from tools.tiny_gguf import TinyModelError, generate

    if paths.model.is_file():
        return False
    with console.status(f"generating {paths.model.name}"):
        try:
            generate(paths.vocab, paths.model)
        except TinyModelError as exc:
            raise BuildError(str(exc)) from exc
    return True


def summary(paths: EnginePaths, version: str, build_s: float | None, note: str) -> Table:
    """The closing table: what is where."""
    record: dict[str, object] = {}
    if paths.record.is_file():
        record = json.loads(paths.record.read_text())
    seconds = build_s if build_s is not None else record.get("build_seconds")
    table = Table(title=f"llama.cpp engine ({note})", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("binary", str(paths.binary))
    table.add_row("version", version)
    table.add_row("sdist", f"{PACKAGE}=={paths.version}")
    took = f"{seconds:.0f} s" if isinstance(seconds, (int, float)) else "unknown"
    table.add_row("last build took", took)
    table.add_row("model", str(paths.model))
    if paths.model.is_file():
        table.add_row("model size", f"{paths.model.stat().st_size / 1e6:.2f} MB")
    table.add_row("build log", str(paths.log))
    return table


def run(paths: EnginePaths, *, if_missing: bool, force: bool, jobs: int, console: Console) -> str:
    """Make sure the binary runs and the model exists; return the binary's version."""
    with build_lock(paths, console):
        version = None if force else binary_version(paths.binary)
        build_s: float | None = None
        if version is None:
            archive = download(paths, console)
            extract(paths, archive, console)
            build_s = build(paths, jobs, console)
            version = binary_version(paths.binary)
            if version is None:
                raise BuildError(f"{paths.binary} was built but `--version` fails")
            record = {"version": version, "build_seconds": round(build_s, 1), "jobs": jobs,
                      "cmake_flags": list(CMAKE_FLAGS), "built_at": time.time()}  # fmt: skip
            paths.record.write_text(json.dumps(record, indent=2) + "\n")
        elif not paths.vocab.is_file():
            # Binary cached but the source tree was cleaned: the vocab comes from the sdist.
            extract(paths, download(paths, console), console)
        made_model = ensure_model(paths, console)
    if if_missing and build_s is None and not made_model:
        console.print(f"llama-server {version} already built: {paths.binary}")
    else:
        note = "built now" if build_s is not None else "cached"
        console.print(summary(paths, version, build_s, note))
    return version


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        description="Build llama-server from the pinned llama-cpp-python sdist, plus a tiny model."
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--if-missing", action="store_true",
                      help="only report when the binary already runs")  # fmt: skip
    mode.add_argument("--force", action="store_true", help="rebuild even if the binary runs")
    mode.add_argument("--print-paths", action="store_true",
                      help="print the cache paths as JSON and exit (no build)")  # fmt: skip
    parser.add_argument("--jobs", "-j", type=int, default=2, help="parallel compile jobs")
    args = parser.parse_args(argv)
    paths = engine_paths()
    if args.print_paths:
        data = paths.as_json()
        data["built"] = "yes" if paths.binary.is_file() and paths.model.is_file() else "no"
        print(json.dumps(data, indent=2))
        return 0
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    console = Console(stderr=False)
    try:
        run(paths, if_missing=args.if_missing, force=args.force, jobs=args.jobs, console=console)
    except BuildError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]; the next run resumes the build")
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
