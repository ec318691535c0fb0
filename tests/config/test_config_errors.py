"""Bad configuration gives one precise message: the file and line, the key, the value, what is allowed."""

from __future__ import annotations

import builtins
import errno
from pathlib import Path
from typing import Any

import pytest

from syshaxd.config import Config, ConfigError, load_config

CASES: list[tuple[str, str, str]] = [
    # (name, file text, the whole message after "PATH:")
    (
        "wrong type",
        "decider:\n  cpu_max_batch_size: abc\n",
        "2: decider.cpu_max_batch_size: invalid value 'abc'; allowed: an integer from 0 to 4096",
    ),
    (
        "quoted number",
        "services:\n  gpu:\n    port: '8001'\n",
        "3: services.gpu.port: invalid value '8001'; allowed: an integer from 1 to 65535",
    ),
    (
        "fraction for an integer",
        "system:\n  max_queue_size: 2.5\n",
        "2: system.max_queue_size: invalid value 2.5; allowed: an integer from 0 to 1000000",
    ),
    (
        "yes is not a boolean",
        "decider:\n  auto_pd_offload: yes\n",
        "2: decider.auto_pd_offload: invalid value 'yes'; allowed: true or false",
    ),
    (
        "out of range",
        "services:\n  gpu:\n    port: 70000\n",
        "3: services.gpu.port: invalid value 70000; allowed: an integer from 1 to 65535",
    ),
    (
        "out of range, exclusive bound",
        "system:\n  request_timeout: 0\n",
        "2: system.request_timeout: invalid value 0; allowed: a number above 0, at most 86400",
    ),
    (
        "not one of the choices",
        "decider:\n  policy: fastest\n",
        "2: decider.policy: invalid value 'fastest'; "
        "allowed: one of classic, adaptive, gpu-only, cpu-only, round-robin, gpu-priority",
    ),
    (
        "unknown key with a close sibling",
        "decider:\n  policy: classic\n  cpu_max_batch_sise: 3\n",
        "3: unknown key 'decider.cpu_max_batch_sise' (did you mean 'decider.cpu_max_batch_size'?); "
        "allowed in decider: policy, max_num_seqs, gpu_max_batch_size, cpu_max_batch_size, "
        "gpu_cache_threshold, cpu_throughput_threshold, token_limit_multiplier, token_limit_min, "
        "token_limit_max, auto_pd_offload, ttft_target, tpot_target",
    ),
    (
        "unknown section",
        "decidr:\n  policy: classic\n",
        "1: unknown key 'decidr' (did you mean 'decider'?); "
        "allowed in the top level: services, models, system, decider, monitor, control, logging, service",
    ),
    (
        "key in the wrong section",
        "monitor:\n  interval: 2\n  policy: classic\n",
        "3: unknown key 'monitor.policy' (did you mean 'decider.policy'?); "
        "allowed in monitor: interval, idle_interval, scrape_timeout, stale_after, down_after, startup_check",
    ),
    (
        "section that is not a mapping",
        "logging: 5\n",
        "1: logging must be a mapping of keys (level, requests_kept, requests_file, requests_file_bytes, requests_file_backups, otlp_endpoint), not 5",
    ),
    (
        "endpoint without a port",
        "services:\n  cpu:\n    endpoints:\n      - host: 10.0.0.2\n",
        "4: services.cpu.endpoints[0].port is required: an integer from 1 to 65535",
    ),
    (
        "token limits in the wrong order",
        "decider:\n  token_limit_min: 500\n  token_limit_max: 100\n",
        "1: decider.token_limit_min (500) is above decider.token_limit_max (100)",
    ),
    (
        "different handoff protocols",
        "services:\n  gpu:\n    handoff: syshax\n",
        "1: services.gpu.handoff is 'syshax' but services.cpu.handoff is 'recompute': "
        "a prefill/decode pair needs the same protocol on both sides",
    ),
    (
        "duplicate engine names",
        "services:\n  gpu:\n    endpoints: [{name: cpu0, port: 9000}]\n",
        "1: engine names must be unique; used more than once: cpu0",
    ),
    (
        "down before stale",
        "monitor:\n  stale_after: 5\n  down_after: 2\n",
        "1: monitor.down_after (2) is below monitor.stale_after (5): "
        "an engine goes stale before it goes down",
    ),
    (
        "control socket path longer than sun_path",
        f"control:\n  socket: /run/{'d' * 100}/control.sock\n",
        "2: control.socket is 118 bytes long; a Unix socket path can be at most 107 bytes "
        "(choose a shorter directory)",
    ),
    (
        "invalid YAML",
        "decider:\n  policy: [classic\n",
        "3:1: invalid YAML: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence that started at line 2, column 11)",
    ),
    (
        "bad indentation",
        "decider:\n  policy: classic\n cpu_max_batch_size: 3\n",
        "3:2: invalid YAML: expected <block end>, but found '<block mapping start>' "
        "(while parsing a block mapping that started at line 1, column 1)",
    ),
    (
        "duplicate key",
        "decider:\n  policy: classic\n  policy: adaptive\n",
        '3:3: invalid YAML: found duplicate key "policy" with value "adaptive" '
        '(original value: "classic") (while constructing a mapping that started at line 2, column 3)',
    ),
    (
        "top level is a list",
        "- services\n- decider\n",
        "1: the top level must be a mapping of sections (services:, models:, decider:, ...), not a list",
    ),
    (
        "top level is text",
        "just some words\n",
        "1: the top level must be a mapping of sections (services:, models:, decider:, ...), not a string",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_file_gives_the_precise_message(text: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={}, use_overrides=False)
    assert str(err.value) == f"{path}:{expected}"


def test_several_problems_are_all_listed_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("decider:\n  policy: x\n  cpu_max_batch_size: -1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={}, use_overrides=False)
    assert str(err.value).splitlines() == [
        "2 problems:",
        f"  {path}:2: decider.policy: invalid value 'x'; "
        "allowed: one of classic, adaptive, gpu-only, cpu-only, round-robin, gpu-priority",
        f"  {path}:3: decider.cpu_max_batch_size: invalid value -1; allowed: an integer from 0 to 4096",
    ]
    assert err.value.key == "decider.policy"


@pytest.mark.parametrize(
    "text", ["", "# only comments\n", "decider:\nmonitor:\n  # all commented\n"]
)
def test_empty_file_and_empty_sections_mean_defaults(text: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    assert load_config(path, env={}, use_overrides=False).config == Config()


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"models:\n  default: \xff\xfe\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={}, use_overrides=False)
    assert str(err.value) == f"{path}: config file is not UTF-8 text (invalid start byte)"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path, env={}, use_overrides=False)
    assert str(err.value) == f"{tmp_path}: is a directory, not a config file"


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads any file whatever its mode, so the refusal is simulated at open().
    path = tmp_path / "config.yaml"
    path.write_text("decider: {}\n", encoding="utf-8")
    real_open = builtins.open

    def refusing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(file) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={}, use_overrides=False)
    assert str(err.value) == f"{path}: cannot read config file: Permission denied"


ENV_CASES: list[tuple[str, str, str]] = [
    (
        "SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE",
        "lots",
        "decider.cpu_max_batch_size: invalid value 'lots'; allowed: an integer from 0 to 4096",
    ),
    (
        "SYSHAX_DECIDER__AUTO_PD_OFFLOAD",
        "maybe",
        "decider.auto_pd_offload: invalid value 'maybe'; allowed: true or false",
    ),
    (
        "SYSHAX_DECIDER__CPU_MAX_BATCH_SIZ",
        "3",
        "unknown key 'decider.cpu_max_batch_siz' (did you mean SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE?); "
        "'syshax config --help' lists every key",
    ),
    (
        "SYSHAX_DECIDER_CPU_MAX_BATCH_SIZE",
        "3",
        "not a config override; did you mean SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE? "
        "(two underscores between the parts of 'decider.cpu_max_batch_size')",
    ),
    (
        "SYSHAX_SERVICES__GPU",
        "8001",
        "'services.gpu' is a section, not a key; set its keys one by one, e.g. SYSHAX_SERVICES__GPU__HOST",
    ),
]


@pytest.mark.parametrize(("var", "raw", "expected"), ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_bad_environment_override_names_the_variable(var: str, raw: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, env={var: raw}, use_overrides=False, locations=())
    assert str(err.value) == f"environment variable {var}: {expected}"


def test_file_mistake_is_reported_against_the_file_even_with_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("decider:\n  policy: nope\n", encoding="utf-8")
    env = {"SYSHAX_DECIDER__POLICY": "classic"}
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env, use_overrides=False)
    assert str(err.value).startswith(f"{path}:2: decider.policy: invalid value 'nope'")


def test_bad_env_value_is_blamed_on_the_variable_not_the_overrides_file(tmp_path: Path) -> None:
    (tmp_path / "overrides.yaml").write_text(
        "decider:\n  cpu_max_batch_size: 3\n", encoding="utf-8"
    )
    env = {"STATE_DIRECTORY": str(tmp_path), "SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE": "-5"}
    with pytest.raises(ConfigError) as err:
        load_config(None, env=env, locations=())
    assert str(err.value) == (
        "environment variable SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE: decider.cpu_max_batch_size: "
        "invalid value -5; allowed: an integer from 0 to 4096"
    )


def test_control_socket_path_limit_is_exactly_sun_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    fits = "/run/" + "d" * (107 - len("/run//control.sock")) + "/control.sock"
    assert len(fits) == 107
    path.write_text(f"control:\n  socket: {fits}\n", encoding="utf-8")
    assert str(load_config(path, env={}, use_overrides=False).config.control.socket) == fits
    path.write_text(f"control:\n  socket: {fits[:-5]}x{fits[-5:]}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="108 bytes long"):
        load_config(path, env={}, use_overrides=False)
