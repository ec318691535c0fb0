"""tools/build_engines.py and tools/tiny_gguf.py: paths, idempotence, a deterministic model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader

from tests.plugins.llama import LlamaBuild
from tools.build_engines import engine_paths
from tools.tiny_gguf import CHAT_TEMPLATE, TinySpec, generate

REPO = Path(__file__).resolve().parents[2]


def _tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env
    )


def test_print_paths_is_json_under_the_xdg_cache(tmp_path: Path) -> None:
    out = _tool("tools/build_engines.py", "--print-paths", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    root = tmp_path / "syshax" / "llama.cpp-0.3.36"
    assert data["cache_dir"] == str(root)
    assert data["binary"] == str(root / "bin" / "llama-server")
    assert data["built"] == "no"
    assert not root.exists(), "--print-paths must not create or build anything"


@pytest.mark.llama
def test_if_missing_does_nothing_when_the_binary_runs(llama_build: LlamaBuild) -> None:
    before = llama_build.binary.stat().st_mtime_ns
    out = _tool("tools/build_engines.py", "--if-missing")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "already built" in out.stdout
    assert llama_build.binary.stat().st_mtime_ns == before


@pytest.mark.llama
def test_tiny_model_is_deterministic_and_has_the_llama_shape(
    llama_build: LlamaBuild, tmp_path: Path
) -> None:
    vocab = engine_paths().vocab
    first = generate(vocab, tmp_path / "a.gguf")
    second = generate(vocab, tmp_path / "b.gguf")
    assert first.read_bytes() == second.read_bytes()
    other = generate(vocab, tmp_path / "c.gguf", TinySpec(seed=7))
    assert other.read_bytes() != first.read_bytes()

    reader = GGUFReader(first)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == 2
    assert fields["llama.embedding_length"] == 64
    assert fields["llama.attention.head_count"] == 4
    assert fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.feed_forward_length"] == 256
    assert fields["tokenizer.chat_template"] == CHAT_TEMPLATE
    assert len(fields["tokenizer.ggml.tokens"]) == fields["llama.vocab_size"] == 32000
    assert {t.name for t in reader.tensors} >= {"token_embd.weight", "blk.1.ffn_down.weight"}


def test_tiny_gguf_reports_a_missing_vocab_without_a_traceback(tmp_path: Path) -> None:
    out = _tool(
        "tools/tiny_gguf.py", "--vocab", str(tmp_path / "none.gguf"), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 2
    assert "vocab GGUF not found" in out.stderr
    assert "Traceback" not in out.stderr
