"""Editing the config file: typed round trips, comments kept, bad values change nothing, atomic saves."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

import syshaxd
from syshaxd.config import (
    ConfigError,
    EngineEndpoint,
    atomic_write,
    display_value,
    get_dotted,
    load_config,
    set_in_file,
)
from syshaxd.config.files import key_lines, load_document

EXAMPLE = Path(syshaxd.__file__).parent / "data" / "config.example.yaml"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A copy of the commented example file."""
    path = tmp_path / "config.yaml"
    shutil.copyfile(EXAMPLE, path)
    return path


def leftovers(directory: Path) -> list[str]:
    """Temporary files an interrupted save could leave behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def reload(path: Path) -> Any:
    return load_config(path, env={}, use_overrides=False).config


# (key, text given on the command line, value after loading the file again, as printed)
ROUND_TRIPS: list[tuple[str, str, Any, str]] = [
    ("decider.cpu_max_batch_size", "24", 24, "24"),
    ("services.gpu.port", "9001", 9001, "9001"),
    ("decider.gpu_cache_threshold", "85.5", 85.5, "85.5"),
    ("monitor.interval", "2", 2.0, "2.0"),
    ("decider.auto_pd_offload", "true", True, "true"),
    ("monitor.startup_check", "no", False, "false"),
    ("models.default", "007", "007", "007"),
    ("models.params.test_prompt", "yes", "yes", "yes"),
    (
        "models.params.test_prompt",
        "a: b # not a comment",
        "a: b # not a comment",
        "a: b # not a comment",
    ),
    ("decider.gpu_max_batch_size", "12", 12, "12"),
    ("decider.gpu_max_batch_size", "null", None, "null"),
    ("services.gpu.name", "null", None, "null"),
    ("decider.policy", "classic", "classic", "classic"),
    ("logging.level", "debug", "debug", "debug"),
    ("control.socket", "/run/x/control.sock", Path("/run/x/control.sock"), "/run/x/control.sock"),
    ("control.state_dir", "relative/dir", Path("relative/dir"), "relative/dir"),
    (
        "services.cpu.endpoints",
        "[{name: cpu1, port: 8004}, {port: 8005, dialect: llamacpp}]",
        [EngineEndpoint(name="cpu1", port=8004), EngineEndpoint(port=8005, dialect="llamacpp")],
        '[{"name": "cpu1", "host": "127.0.0.1", "port": 8004, "dialect": null}, '
        '{"name": null, "host": "127.0.0.1", "port": 8005, "dialect": "llamacpp"}]',
    ),
    ("services.gpu.endpoints", "[]", [], "[]"),
]


@pytest.mark.parametrize(
    ("key", "raw", "expected", "shown"), ROUND_TRIPS, ids=[f"{k}={r}" for k, r, _, _ in ROUND_TRIPS]
)
def test_set_round_trips_and_keeps_every_other_line(
    key: str, raw: str, expected: Any, shown: str, conf: Path
) -> None:
    before = conf.read_text(encoding="utf-8").splitlines()
    line_no = key_lines(load_document(conf))[key]

    returned = set_in_file(conf, key, raw)

    assert returned == expected
    assert display_value(returned) == shown
    assert get_dotted(reload(conf), key) == expected
    after = conf.read_text(encoding="utf-8").splitlines()
    assert len(after) == len(before)
    changed = [i + 1 for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed in ([line_no], [])  # [] when the value was already that
    old, new = before[line_no - 1], after[line_no - 1]
    assert new.endswith(old[old.index(" #") :].lstrip())  # the key's own comment survives


def test_secret_round_trips_but_is_never_printed(conf: Path) -> None:
    returned = set_in_file(conf, "services.conductor.api_key", "s3cret")
    assert display_value(returned) == "********"
    key = reload(conf).services.conductor.api_key
    assert isinstance(key, SecretStr) and key.get_secret_value() == "s3cret"
    set_in_file(conf, "services.conductor.api_key", "null")
    assert reload(conf).services.conductor.api_key is None


def test_set_creates_missing_sections_in_a_small_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("# mine\nmodels:\n  default: qwen  # the model\ndecider:\n", encoding="utf-8")
    set_in_file(path, "decider.policy", "classic")
    set_in_file(path, "models.params.max_tokens", "64")
    config = reload(path)
    assert (config.decider.policy, config.models.params.max_tokens) == ("classic", 64)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# mine\nmodels:\n  default: qwen  # the model\n")


BAD_EDITS: list[tuple[str, str, str]] = [
    (
        "decider.cpu_max_batch_size",
        "abc",
        "decider.cpu_max_batch_size: invalid value 'abc'; allowed: an integer from 0 to 4096",
    ),
    (
        "decider.cpu_max_batch_size",
        "5000",
        "decider.cpu_max_batch_size: invalid value 5000; allowed: an integer from 0 to 4096",
    ),
    ("decider.gpu_cache_threshold", "hot", "decider.gpu_cache_threshold: invalid value 'hot'"),
    ("decider.auto_pd_offload", "maybe", "allowed: true or false"),
    (
        "decider.policy",
        "fastest",
        "allowed: one of classic, adaptive, gpu-only, cpu-only, round-robin, gpu-priority",
    ),
    ("services.gpu.endpoints", "[{port: 0}]", "services.gpu.endpoints[0].port: invalid value 0"),
    ("services.gpu.endpoints", "8003", "services.gpu.endpoints: invalid value 8003"),
    (
        "decider.token_limit_min",
        "5000",
        "decider.token_limit_min (5000) is above decider.token_limit_max",
    ),
    ("services.gpu.handoff", "syshax", "services.cpu.handoff is 'recompute'"),
    ("decider.cpu_max_batch_sise", "3", "unknown key 'decider.cpu_max_batch_sise' (did you mean"),
    ("decider", "3", "'decider' is a section, not a key"),
]


@pytest.mark.parametrize(
    ("key", "raw", "fragment"), BAD_EDITS, ids=[f"{k}={r}" for k, r, _ in BAD_EDITS]
)
def test_bad_value_leaves_the_file_byte_identical(
    key: str, raw: str, fragment: str, conf: Path
) -> None:
    before = conf.read_bytes()
    with pytest.raises(ConfigError) as err:
        set_in_file(conf, key, raw)
    assert fragment in str(err.value)
    assert conf.read_bytes() == before
    assert leftovers(conf.parent) == []


def test_bad_value_message_says_the_file_is_unchanged(conf: Path) -> None:
    with pytest.raises(ConfigError) as err:
        set_in_file(conf, "decider.cpu_max_batch_size", "-1")
    assert str(err.value) == (
        "decider.cpu_max_batch_size: invalid value -1; allowed: an integer from 0 to 4096 "
        f"({conf} left unchanged)"
    )


def test_broken_file_is_reported_and_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("decider:\n  policy: [classic\n", encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=rf"^{path}:3:1: invalid YAML"):
        set_in_file(path, "decider.policy", "classic")
    assert path.read_bytes() == before


def test_a_bad_value_elsewhere_can_be_fixed_by_setting_it(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("decider:\n  cpu_max_batch_size: lots  # oops\n", encoding="utf-8")
    set_in_file(path, "decider.cpu_max_batch_size", "8")
    assert path.read_text(encoding="utf-8") == "decider:\n  cpu_max_batch_size: 8     # oops\n"


def test_edit_keeps_mode_and_follows_a_symlink(conf: Path, tmp_path: Path) -> None:
    conf.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to(conf)
    set_in_file(link, "decider.cpu_max_batch_size", "7")
    assert link.is_symlink()
    assert reload(conf).decider.cpu_max_batch_size == 7
    assert conf.stat().st_mode & 0o777 == 0o600


# ---- atomic save -------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["replace", "fsync", "chmod"])
def test_crash_during_save_leaves_old_file_and_no_temp_file(
    failing: str, conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = conf.read_bytes()

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError, match="No space left"):
        set_in_file(conf, "decider.cpu_max_batch_size", "24")
    assert conf.read_bytes() == before
    assert leftovers(conf.parent) == []


def test_interrupt_during_save_leaves_old_file_and_no_temp_file(
    conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = conf.read_bytes()

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(conf, "half: written\n")
    assert conf.read_bytes() == before
    assert leftovers(conf.parent) == []


CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from syshaxd.config import files as configfile

    def hang(src, dst):
        print("written", src, flush=True)
        time.sleep(60)

    configfile.os.replace = hang
    configfile.atomic_write(Path(sys.argv[1]), "decider:\\n  cpu_max_batch_size: 24\\n")
    """
)


def test_process_killed_between_write_and_rename_leaves_old_file(conf: Path) -> None:
    before = conf.read_bytes()
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_WRITER, str(conf)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("written "), line
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        tmp = Path(line.split(" ", 1)[1].strip())
        assert tmp.parent == conf.parent  # same directory, so the rename is atomic
        assert tmp.read_text(encoding="utf-8") == "decider:\n  cpu_max_batch_size: 24\n"
        assert conf.read_bytes() == before
        assert reload(conf).decider.cpu_max_batch_size == 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        for name in leftovers(conf.parent):
            os.unlink(conf.parent / name)


def test_atomic_write_creates_missing_directories_with_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "config.yaml"
    atomic_write(target, "x: 1\n")
    assert target.read_text(encoding="utf-8") == "x: 1\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert leftovers(target.parent) == []
