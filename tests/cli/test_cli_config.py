"""The real ``syshax`` executable: config commands, messages and exit codes (0 ok, 2 usage/config, 1 other)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import syshaxd
from syshaxd.cli.configcmds import example_text
from syshaxd.config import iter_keys

EXAMPLE = Path(syshaxd.__file__).parent / "data" / "config.example.yaml"
ETC_CONFIG = Path("/etc/syshax/config.yaml")


def _syshax() -> list[str]:
    script = Path(sys.executable).parent / "syshax"
    return [str(script)] if script.exists() else [sys.executable, "-m", "syshaxd.cli"]


class Cli:
    """Runs ``syshax`` in a clean environment with the working directory in tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
        self.env["STATE_DIRECTORY"] = str(tmp_path / "state")

    def __call__(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run and check that nothing printed a traceback."""
        proc = subprocess.run(
            [*_syshax(), *args],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The syshax command, isolated in tmp_path."""
    return Cli(tmp_path)


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A copy of the example config."""
    path = tmp_path / "config.yaml"
    shutil.copyfile(EXAMPLE, path)
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


no_etc = pytest.mark.skipif(ETC_CONFIG.exists(), reason="this host has /etc/syshax/config.yaml")


# ---- bad config: exit 2, one precise line, no traceback ------------------------------


BAD_FILES = [
    ("wrong type", "decider:\n  cpu_max_batch_size: abc\n", ":2: decider.cpu_max_batch_size: invalid value 'abc'; allowed: an integer from 0 to 4096"),
    ("out of range", "services:\n  conductor:\n    port: 0\n", ":3: services.conductor.port: invalid value 0; allowed: an integer from 1 to 65535"),
    ("unknown key", "decider:\n  polcy: classic\n", ":2: unknown key 'decider.polcy' (did you mean 'decider.policy'?)"),
    ("invalid YAML", "decider: [\n", ":2:1: invalid YAML: expected the node content, but found '<stream end>'"),
    ("not a mapping", "- a\n", ":1: the top level must be a mapping of sections"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_bad_config_file_exits_2_with_the_precise_message(
    cli: Cli, tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path / "bad.yaml", text)
    proc = cli("check-config", "--config", str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"syshax: {path}{expected}")
    assert proc.stderr.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize("command", ["interfaces", "model", "run"])
def test_every_config_reading_command_exits_2_on_bad_config(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    path = write(tmp_path / "bad.yaml", BAD_FILES[0][1])
    proc = cli(command, "--config", str(path))
    assert proc.returncode == 2
    assert proc.stderr == f"syshax{'d' if command == 'run' else ''}: {path}{BAD_FILES[0][2]}\n"


def test_unreadable_config_exits_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    proc = cli("check-config", "--config", "adir")
    assert (proc.returncode, proc.stderr) == (
        2,
        "syshax: adir: is a directory, not a config file\n",
    )


def test_missing_config_exits_2(cli: Cli) -> None:
    proc = cli("--config", "nope.yaml", "model")
    assert (proc.returncode, proc.stderr) == (
        2,
        "syshax: nope.yaml: config file not found (given with --config)\n",
    )


def test_bad_env_override_exits_2(cli: Cli, conf: Path) -> None:
    proc = cli(
        "check-config", "--config", str(conf), env={"SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE": "lots"}
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "syshax: environment variable SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE: decider.cpu_max_batch_size: "
        "invalid value 'lots'; allowed: an integer from 0 to 4096\n"
    )


# ---- usage errors ------------------------------------------------------------------


def test_unknown_command_suggests_the_closest(cli: Cli) -> None:
    proc = cli("chek-config")
    assert proc.returncode == 2
    assert (
        "syshax: error: unknown command 'chek-config' (did you mean 'check-config'?)" in proc.stderr
    )
    assert "commands: init, config, check-config" in proc.stderr


@pytest.mark.parametrize(
    "args", [["--bogus", "version"], ["config", "a", "b", "c"], ["init", "--forse"], []]
)
def test_usage_errors_exit_2(cli: Cli, args: list[str]) -> None:
    proc = cli(*args)
    assert proc.returncode == 2
    assert "usage: syshax" in proc.stderr


# ---- init --------------------------------------------------------------------------


def test_init_writes_the_example_and_refuses_to_overwrite(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "etc" / "config.yaml"
    first = cli("init", "--config", str(target))
    assert first.returncode == 0
    assert (
        target.read_text(encoding="utf-8") == example_text() == EXAMPLE.read_text(encoding="utf-8")
    )

    target.write_text("models:\n  default: mine\n", encoding="utf-8")
    again = cli("init", "--config", str(target))
    assert again.returncode == 1
    assert again.stderr == f"syshax: {target} exists; use --force to overwrite it\n"
    assert target.read_text(encoding="utf-8") == "models:\n  default: mine\n"

    forced = cli("init", "--force", "--config", str(target))
    assert forced.returncode == 0
    assert target.read_text(encoding="utf-8") == example_text()


@no_etc
def test_init_without_a_path_writes_config_in_the_working_directory(
    cli: Cli, tmp_path: Path
) -> None:
    proc = cli("init")
    assert proc.returncode == 0
    assert (tmp_path / "config" / "config.yaml").read_text(encoding="utf-8") == example_text()
    assert cli("init").returncode == 1


def test_init_where_a_directory_cannot_be_made_exits_1(cli: Cli, tmp_path: Path) -> None:
    write(tmp_path / "afile", "x")
    proc = cli("init", "--config", str(tmp_path / "afile" / "config.yaml"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("syshax: ")
    assert "Not a directory" in proc.stderr or "File exists" in proc.stderr


# ---- lookup through the real CLI ----------------------------------------------------


@no_etc
def test_cli_finds_config_in_working_directory_and_via_env(cli: Cli, tmp_path: Path) -> None:
    write(tmp_path / "config" / "config.yaml", "models:\n  default: from-cwd\n")
    write(tmp_path / "other.yaml", "models:\n  default: from-env\n")
    assert cli("model").stdout == "from-cwd\n"
    assert cli("model", env={"SYSHAX_CONFIG": "other.yaml"}).stdout == "from-env\n"
    assert cli("model", "--config", "other.yaml").stdout == "from-env\n"
    assert cli("--config", "other.yaml", "model").stdout == "from-env\n"


# ---- check-config, interfaces, model, version ---------------------------------------


def test_check_config_reports_file_overrides_and_env(cli: Cli, conf: Path, tmp_path: Path) -> None:
    overrides = write(tmp_path / "state" / "overrides.yaml", "decider:\n  cpu_max_batch_size: 30\n")
    proc = cli("check-config", "--config", str(conf), env={"SYSHAX_DECIDER__POLICY": "classic"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"config ok: {conf}",
        f"runtime overrides: {overrides}",
        "engines: 1 GPU, 1 CPU; policy classic",
        f"  decider.cpu_max_batch_size = 30  (from overrides {overrides})",
        "  decider.policy = classic  (from env SYSHAX_DECIDER__POLICY)",
    ]


@no_etc
def test_check_config_without_any_file_uses_defaults(cli: Cli) -> None:
    proc = cli("check-config")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == "config ok: no file found, built-in defaults"


def test_interfaces_lists_every_engine_and_the_conductor(cli: Cli, tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "services:\n"
        "  gpu: {host: 10.0.0.5, port: 9001}\n"
        "  cpu: {port: 9002, dialect: llamacpp, endpoints: [{name: numa1, port: 9003}]}\n"
        "  conductor: {host: '::1', port: 9010}\n",
    )
    proc = cli("interfaces", "--config", str(path))
    assert proc.returncode == 0
    assert [line.split() for line in proc.stdout.splitlines()] == [
        ["gpu", "gpu0", "http://10.0.0.5:9001", "(vllm-v1)"],
        ["cpu", "cpu0", "http://127.0.0.1:9002", "(llamacpp)"],
        ["cpu", "numa1", "http://127.0.0.1:9003", "(llamacpp)"],
        ["conductor", "http://[::1]:9010/v1"],
    ]


def test_model_and_version(cli: Cli, conf: Path) -> None:
    assert cli("model", "--config", str(conf)).stdout == "ds-32b\n"
    proc = cli("version")
    assert (proc.returncode, proc.stdout) == (0, f"syshax {syshaxd.__version__}\n")


# ---- config KEY [VALUE] -------------------------------------------------------------


def test_config_help_lists_every_key_with_type_default_and_meaning(cli: Cli) -> None:
    proc = cli("config", "--help")
    assert proc.returncode == 0
    text = proc.stdout
    for info in iter_keys():
        match = re.search(
            rf"^  {re.escape(info.key)}  \((.+), default (.+)\)\n      (.+)\n      allowed: (.+)$",
            text,
            re.M,
        )
        assert match, info.key
        assert match.group(1) == info.type_name
        assert match.group(3) == info.description
        assert match.group(4) == info.allowed


def test_config_set_then_get_through_the_cli(cli: Cli, conf: Path) -> None:
    for key, value in [
        ("decider.cpu_max_batch_size", "24"),
        ("decider.auto_pd_offload", "true"),
        ("decider.gpu_max_batch_size", "null"),
        ("models.default", "007"),
    ]:
        set_proc = cli("config", key, value, "--config", str(conf))
        assert set_proc.returncode == 0, set_proc.stderr
        assert set_proc.stdout == f"{key} = {value}  ({conf})\n"
        assert cli("config", key, "--config", str(conf)).stdout == f"{value}\n"


def test_config_bad_value_exits_2_and_leaves_the_file(cli: Cli, conf: Path) -> None:
    before = conf.read_bytes()
    proc = cli("config", "decider.policy", "fastest", "--config", str(conf))
    assert proc.returncode == 2
    assert proc.stderr == (
        "syshax: decider.policy: invalid value 'fastest'; allowed: one of classic, adaptive, "
        f"gpu-only, cpu-only, round-robin, gpu-priority ({conf} left unchanged)\n"
    )
    assert conf.read_bytes() == before


def test_config_unknown_key_exits_2_with_suggestion(cli: Cli, conf: Path) -> None:
    proc = cli("config", "decider.cpu_batch_size", "--config", str(conf))
    assert proc.returncode == 2
    assert (
        "unknown key 'decider.cpu_batch_size' (did you mean 'decider.cpu_max_batch_size'?)"
        in proc.stderr
    )


def test_config_set_without_a_file_says_to_run_init(cli: Cli, tmp_path: Path) -> None:
    proc = cli("config", "decider.policy", "classic", "--config", "missing.yaml")
    assert proc.returncode == 2
    assert (
        proc.stderr == "syshax: missing.yaml: config file not found; create it with 'syshax init'\n"
    )
    assert not (tmp_path / "missing.yaml").exists()


def test_config_get_shows_the_file_value_and_notes_an_env_override(cli: Cli, conf: Path) -> None:
    proc = cli(
        "config", "decider.cpu_max_batch_size", "--config", str(conf),
        env={"SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE": "3"},
    )  # fmt: skip
    assert proc.stdout == "20\n"
    assert (
        proc.stderr
        == "note: $SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE is set and overrides this value at run time\n"
    )
