"""``syshax demo``'s command line refuses bad options with a precise message, before starting anything."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from syshaxd.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--load", "0"], "--load: must be above 0"),
        (["--speed", "fast"], "--speed: not a number: 'fast'"),
        (["--policy", "best"], "invalid choice: 'best'"),
        (["--set", "decider.cpu_max_batch=3"], "did you mean 'decider.cpu_max_batch_size'"),
        (["--set", "decider.cpu_max_batch_size=-1"], "decider.cpu_max_batch_size: invalid value -1"),
        (["--set", "services.gpu.port=1"], "only decider.* keys"),
        (["--set", "oops"], "expected KEY=VALUE"),
        (["--trace", "/nonexistent/trace.csv"], "--trace: /nonexistent/trace.csv: cannot read the trace"),
        (["--json-summary", "/nonexistent/dir/s.json"], "directory /nonexistent/dir does not exist"),
        (["--engines", "llama", "--speed", "5"], "--speed only applies to simulated engines"),
        (["--engines", "llama", "--handoff", "syshax"], "needs vLLM engines"),
        (["--llama-model", "m.gguf"], "need --engines llama"),
    ],
)
def test_bad_options_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["demo", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_a_trace_file_with_wrong_columns_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("when,in,out\n1,2,3\n")
    assert main(["demo", "--trace", str(bad)]) == 2
    assert "unknown columns" in capsys.readouterr().err


def test_missing_llama_build_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = main(["demo", "--engines", "llama", "--headless", "--duration", "1",
                 "--llama-server", str(tmp_path / "nope"), "--llama-model", str(tmp_path / "nope.gguf")])
    assert code == 1
    out = capsys.readouterr().out
    assert "run `make engines`" in out
    assert list(tmp_path.iterdir()) == []  # its runtime directory is gone again
