"""Loading the config: the example file, the lookup order, the overrides file and the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

import syshaxd
from syshaxd import locate
from syshaxd.config import (
    RUNTIME_KEYS,
    Config,
    ConfigError,
    EngineEndpoint,
    engine_specs,
    get_dotted,
    iter_keys,
    load_config,
    save_overrides,
)
from syshaxd.config.files import key_lines, load_document
from syshaxd.locate import CONFIG_ENV

EXAMPLE = Path(syshaxd.__file__).parent / "data" / "config.example.yaml"
REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    """Write a file, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def model_file(path: Path, name: str) -> Path:
    """A config file whose only setting is models.default = name (tells files apart)."""
    return write(path, f"models:\n  default: {name}\n")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no SYSHAX_ variables and a private state directory."""
    return {"STATE_DIRECTORY": str(tmp_path / "state")}


# ---- the example file --------------------------------------------------------------


def test_example_file_validates_to_exactly_the_defaults(env: dict[str, str]) -> None:
    loaded = load_config(EXAMPLE, env=env)
    assert loaded.path == EXAMPLE
    assert loaded.config == Config()


def test_example_file_has_every_key_of_the_model_with_a_comment() -> None:
    lines = key_lines(load_document(EXAMPLE))
    text = EXAMPLE.read_text(encoding="utf-8").splitlines()
    missing, uncommented = [], []
    for info in iter_keys():
        if info.key not in lines:
            missing.append(info.key)
            continue
        line = text[lines[info.key] - 1]
        above = text[lines[info.key] - 2].strip()
        comment = line.split(" #", 1)[1].strip() if " #" in line else ""
        if not comment and not above.startswith("#"):
            uncommented.append(info.key)
    assert missing == []
    assert uncommented == []


def test_every_model_key_has_a_description() -> None:
    assert [k.key for k in iter_keys() if not k.description] == []


def test_repo_config_directory_holds_the_packaged_example() -> None:
    shipped = REPO / "config" / "config.example.yaml"
    assert shipped.read_text(encoding="utf-8") == EXAMPLE.read_text(encoding="utf-8")


def test_defaults_bind_to_loopback() -> None:
    services = Config().services
    assert {services.gpu.host, services.cpu.host, services.conductor.host} == {"127.0.0.1"}


def test_issue_keys_exist() -> None:
    keys = {k.key for k in iter_keys()}
    wanted = {
        *(f"services.{s}.{k}" for s in ("gpu", "cpu", "conductor") for k in ("host", "port")),
        "models.default",
        *(
            f"models.params.{k}"
            for k in ("max_tokens", "temperature", "test_prompt", "test_tokens")
        ),
        "system.max_queue_size",
        "system.request_timeout",
        *(
            f"decider.{k}"
            for k in (
                "max_num_seqs",
                "gpu_cache_threshold",
                "cpu_throughput_threshold",
                "token_limit_multiplier",
                "token_limit_min",
                "token_limit_max",
                "auto_pd_offload",
                "gpu_max_batch_size",
                "cpu_max_batch_size",
                "policy",
            )
        ),  # fmt: skip
        "monitor.interval",
        *(f"services.{d}.{k}" for d in ("gpu", "cpu") for k in ("dialect", "handoff", "endpoints")),
        "control.socket",
        "control.group",
        "services.conductor.api_key",
    }
    assert wanted - keys == set()


# ---- lookup order ------------------------------------------------------------------


@pytest.fixture
def four_files(tmp_path: Path) -> dict[str, Path]:
    """One config file per lookup step, each naming a different model."""
    return {
        "explicit": model_file(tmp_path / "explicit.yaml", "from-explicit"),
        "env": model_file(tmp_path / "env.yaml", "from-env"),
        "etc": model_file(tmp_path / "etc" / "syshax" / "config.yaml", "from-etc"),
        "cwd": model_file(tmp_path / "config" / "config.yaml", "from-cwd"),
    }


def test_lookup_order_explicit_then_env_then_etc_then_cwd(
    four_files: dict[str, Path],
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    locations = (four_files["etc"], Path("config/config.yaml"))
    with_env = {**env, CONFIG_ENV: str(four_files["env"])}

    def model(explicit: Path | None, environ: dict[str, str]) -> str:
        return load_config(explicit, env=environ, locations=locations).config.models.default

    assert model(four_files["explicit"], with_env) == "from-explicit"
    assert model(None, with_env) == "from-env"
    assert model(None, env) == "from-etc"
    four_files["etc"].unlink()
    assert model(None, env) == "from-cwd"
    loaded = load_config(None, env=env, locations=locations)
    assert loaded.path == Path("config/config.yaml")
    four_files["cwd"].unlink()
    nothing = load_config(None, env=env, locations=locations)
    assert nothing.path is None
    assert nothing.config == Config()


def test_without_a_named_file_etc_is_tried_before_the_working_directory(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the loader does, not what a constant holds: record the files it looks for, and
    # leave /etc out of it so the test means the same on a host that has a config there.
    etc = Path("/etc/syshax/config.yaml")
    model_file(tmp_path / "config" / "config.yaml", "from-cwd")
    monkeypatch.chdir(tmp_path)
    looked: list[Path] = []
    real_is_file = Path.is_file

    def is_file(self: Path) -> bool:
        looked.append(self)
        return False if self == etc else real_is_file(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    loaded = load_config(env=env, use_overrides=False)
    assert looked == [etc, Path("config/config.yaml")]
    assert loaded.path == Path("config/config.yaml")
    assert loaded.config.models.default == "from-cwd"


def test_default_locations_are_read_at_call_time(
    four_files: dict[str, Path], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locate, "CONFIG_LOCATIONS", (four_files["etc"],))
    assert load_config(env=env).config.models.default == "from-etc"


@pytest.mark.parametrize("via", ["explicit", "env"])
def test_named_file_that_does_not_exist_is_an_error(
    via: str, tmp_path: Path, env: dict[str, str]
) -> None:
    missing = tmp_path / "nope.yaml"
    explicit = missing if via == "explicit" else None
    environ = env if via == "explicit" else {**env, CONFIG_ENV: str(missing)}
    with pytest.raises(ConfigError) as err:
        load_config(explicit, env=environ, locations=())
    assert str(missing) in str(err.value)
    assert "not found" in str(err.value)
    assert ("--config" if via == "explicit" else "$SYSHAX_CONFIG") in str(err.value)


def test_a_retired_key_is_ignored_with_a_warning_naming_file_and_line(
    tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # A file that started yesterday's daemon must start today's: the key is dropped, and said so.
    path = write(tmp_path / "c.yaml", "system:\n  max_queue_size: 7\n  recycle_when_idle: true\n")
    with caplog.at_level("WARNING", logger="syshaxd.config"):
        loaded = load_config(path, env=env, locations=())
    assert loaded.config.system.max_queue_size == 7
    assert not hasattr(loaded.config.system, "recycle_when_idle")
    [record] = [r for r in caplog.records if "retired" in r.getMessage()]
    assert f"{path}:3" in record.getMessage()
    assert "system.recycle_when_idle" in record.getMessage()


def test_an_unknown_key_next_to_a_retired_one_is_still_an_error(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "c.yaml", "system:\n  recycle_rss_ratio: 2\n  max_queue_sise: 7\n")
    with pytest.raises(ConfigError, match="max_queue_sise"):
        load_config(path, env=env, locations=())


# ---- environment overrides ---------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "raw", "key", "expected"),
    [
        ("SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE", "24", "decider.cpu_max_batch_size", 24),
        ("SYSHAX_DECIDER__GPU_CACHE_THRESHOLD", "85.5", "decider.gpu_cache_threshold", 85.5),
        ("SYSHAX_DECIDER__AUTO_PD_OFFLOAD", "true", "decider.auto_pd_offload", True),
        ("SYSHAX_DECIDER__GPU_MAX_BATCH_SIZE", "12", "decider.gpu_max_batch_size", 12),
        ("SYSHAX_SERVICES__GPU__NAME", "null", "services.gpu.name", None),
        ("SYSHAX_DECIDER__POLICY", "classic", "decider.policy", "classic"),
        ("SYSHAX_MODELS__DEFAULT", "007", "models.default", "007"),
        ("SYSHAX_MODELS__PARAMS__TEST_PROMPT", "yes", "models.params.test_prompt", "yes"),
        ("SYSHAX_CONTROL__SOCKET", "/tmp/s.sock", "control.socket", Path("/tmp/s.sock")),
        ("SYSHAX_SERVICES__CPU__PORT", "9002", "services.cpu.port", 9002),
    ],
)
def test_env_override_converts_to_the_key_type(
    var: str, raw: str, key: str, expected: Any, env: dict[str, str]
) -> None:
    loaded = load_config(EXAMPLE, env={**env, var: raw})
    assert get_dotted(loaded.config, key) == expected
    assert loaded.sources[key] == f"env {var}"
    assert loaded.sources["decider.max_num_seqs"] == f"file {EXAMPLE}"


def test_env_override_of_secret_and_endpoint_list(env: dict[str, str]) -> None:
    loaded = load_config(
        None,
        env={
            **env,
            "SYSHAX_SERVICES__CONDUCTOR__API_KEY": "s3cret",
            "SYSHAX_SERVICES__CPU__ENDPOINTS": "[{name: cpu1, port: 8004}]",
        },
        locations=(),
    )
    key = loaded.config.services.conductor.api_key
    assert isinstance(key, SecretStr) and key.get_secret_value() == "s3cret"
    assert loaded.config.services.cpu.endpoints == [EngineEndpoint(name="cpu1", port=8004)]
    assert [s.name for s in engine_specs(loaded.config)] == ["gpu0", "cpu0", "cpu1"]


def test_variables_without_double_underscore_are_not_overrides(env: dict[str, str]) -> None:
    loaded = load_config(None, env={**env, "SYSHAX_SOMETHING": "1"}, locations=())
    assert loaded.config == Config()
    assert loaded.sources == {}


# ---- the runtime overrides file ----------------------------------------------------


def test_layers_file_then_overrides_then_env(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "config.yaml",
        "decider:\n  cpu_max_batch_size: 10\n  policy: classic\n  max_num_seqs: 7\n",
    )
    overrides = write(
        tmp_path / "state" / "overrides.yaml",
        "decider:\n  cpu_max_batch_size: 30\n  policy: cpu-only\n",
    )
    loaded = load_config(path, env={**env, "SYSHAX_DECIDER__POLICY": "gpu-only"})
    decider = loaded.config.decider
    assert (decider.max_num_seqs, decider.cpu_max_batch_size, decider.policy) == (7, 30, "gpu-only")
    assert loaded.overrides_path == overrides
    assert loaded.sources["decider.max_num_seqs"] == f"file {path}"
    assert loaded.sources["decider.cpu_max_batch_size"] == f"overrides {overrides}"
    assert loaded.sources["decider.policy"] == "env SYSHAX_DECIDER__POLICY"
    assert "monitor.interval" not in loaded.sources  # the default


def test_overrides_file_is_ignored_when_asked(tmp_path: Path, env: dict[str, str]) -> None:
    write(tmp_path / "state" / "overrides.yaml", "decider:\n  cpu_max_batch_size: 30\n")
    loaded = load_config(None, env=env, locations=(), use_overrides=False)
    assert loaded.config.decider.cpu_max_batch_size == Config().decider.cpu_max_batch_size


def test_overrides_file_with_empty_sections_changes_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    write(tmp_path / "state" / "overrides.yaml", "# nothing saved yet\ndecider:\nmonitor: {}\n")
    loaded = load_config(None, env=env, locations=())
    assert loaded.config == Config()
    assert loaded.sources == {}


def test_overrides_file_lives_in_the_configured_state_dir(
    tmp_path: Path, env: dict[str, str]
) -> None:
    state = tmp_path / "elsewhere"
    path = write(tmp_path / "config.yaml", f"control:\n  state_dir: {state}\n")
    write(state / "overrides.yaml", "monitor:\n  interval: 3.5\n")
    loaded = load_config(path, env=env)
    assert loaded.overrides_path == state / "overrides.yaml"
    assert loaded.config.monitor.interval == 3.5


@pytest.mark.parametrize("key", ["services.gpu.port", "models.default", "control.group"])
def test_overrides_file_accepts_only_runtime_keys(
    key: str, tmp_path: Path, env: dict[str, str]
) -> None:
    section, _, rest = key.partition(".")
    nested = "".join(f"\n{'  ' * (i + 1)}{p}:" for i, p in enumerate(rest.split(".")))
    overrides = write(tmp_path / "state" / "overrides.yaml", f"{section}:{nested} 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(None, env=env, locations=())
    message = str(err.value)
    assert f"{overrides}:{1 + len(rest.split('.'))}" in message
    assert repr(key) in message
    assert "decider.cpu_max_batch_size" in message  # lists what is allowed


def test_bad_value_in_overrides_file_names_that_file(tmp_path: Path, env: dict[str, str]) -> None:
    overrides = write(tmp_path / "state" / "overrides.yaml", "decider:\n  cpu_max_batch_size: -3\n")
    with pytest.raises(ConfigError) as err:
        load_config(EXAMPLE, env=env)
    assert str(err.value) == (
        f"{overrides}:2: decider.cpu_max_batch_size: invalid value -3; "
        "allowed: an integer from 0 to 4096"
    )


def test_saved_overrides_load_back(tmp_path: Path, env: dict[str, str]) -> None:
    values = {
        "decider.cpu_max_batch_size": 30,
        "decider.policy": "classic",
        "monitor.interval": 0.5,
    }
    save_overrides(tmp_path / "state" / "overrides.yaml", values)
    loaded = load_config(None, env=env, locations=())
    assert {k: get_dotted(loaded.config, k) for k in values} == values
    assert (tmp_path / "state" / "overrides.yaml").stat().st_mode & 0o777 == 0o640


def test_save_overrides_refuses_a_non_runtime_key(tmp_path: Path) -> None:
    target = tmp_path / "overrides.yaml"
    with pytest.raises(ConfigError, match="services.gpu.port"):
        save_overrides(target, {"decider.policy": "classic", "services.gpu.port": 1})
    assert not target.exists()


def test_runtime_keys_are_real_keys() -> None:
    assert RUNTIME_KEYS <= {k.key for k in iter_keys()}
    assert "decider.cpu_max_batch_size" in RUNTIME_KEYS
    assert "services.gpu.port" not in RUNTIME_KEYS
