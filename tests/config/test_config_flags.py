"""Engine flags in the overrides file: written by save, read back by load_config, checked."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from syshaxd.config import ConfigError, EngineFlags, load_config, save_overrides

#: Three engines: gpu0, cpu0 and cpu1.
CONFIG = "services:\n  cpu:\n    endpoints: [{name: cpu1, port: 8004}]\n"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


@pytest.fixture
def overrides(tmp_path: Path) -> Path:
    return tmp_path / "state" / "overrides.yaml"


def load(config: Path, overrides: Path, use_overrides: bool = True) -> dict[str, EngineFlags]:
    return load_config(config, env={}, overrides_path=overrides, use_overrides=use_overrides).engine_flags


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_saved_flags_load_back(config: Path, overrides: Path) -> None:
    flags = {
        "gpu0": EngineFlags(),  # the default: not written
        "cpu0": EngineFlags(draining=True),
        "cpu1": EngineFlags(enabled=False, draining=True),
    }
    save_overrides(overrides, {"decider.max_num_seqs": 4}, flags)
    assert yaml.safe_load(overrides.read_text()) == {
        "decider": {"max_num_seqs": 4},
        "engines": {"cpu0": {"draining": True}, "cpu1": {"enabled": False, "draining": True}},
    }
    loaded = load_config(config, env={}, overrides_path=overrides)
    assert loaded.engine_flags == {"cpu0": flags["cpu0"], "cpu1": flags["cpu1"]}
    assert loaded.config.decider.max_num_seqs == 4


def test_only_flags_are_saved_when_no_value_differs(config: Path, overrides: Path) -> None:
    save_overrides(overrides, {}, {"gpu0": EngineFlags(enabled=False)})
    assert yaml.safe_load(overrides.read_text()) == {"engines": {"gpu0": {"enabled": False}}}
    assert load(config, overrides) == {"gpu0": EngineFlags(enabled=False)}


def test_default_flags_leave_no_engines_section(config: Path, overrides: Path) -> None:
    save_overrides(overrides, {"decider.max_num_seqs": 4}, {"gpu0": EngineFlags(), "cpu0": EngineFlags()})
    assert "engines" not in yaml.safe_load(overrides.read_text())
    assert load(config, overrides) == {}


def test_flags_are_not_read_when_overrides_are_not(config: Path, overrides: Path) -> None:
    save_overrides(overrides, {}, {"cpu0": EngineFlags(draining=True)})
    assert load(config, overrides, use_overrides=False) == {}


@pytest.mark.parametrize("text", ["engines:\n", "engines: {}\n", "engines:\n  cpu0:\n"])
def test_empty_engines_section_or_entry_means_defaults(config: Path, overrides: Path, text: str) -> None:
    write(overrides, text)
    assert all(flags == EngineFlags() for flags in load(config, overrides).values())


def test_a_flag_of_an_engine_the_config_no_longer_has_is_ignored_with_a_warning(
    config: Path, overrides: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The admin renamed cpu1 to cpu2 in the YAML file: the daemon must still start.
    write(overrides, "engines:\n  cpu0:\n    draining: true\n  cpu2:\n    enabled: false\n")
    with caplog.at_level(logging.WARNING, logger="syshaxd.config"):
        flags = load(config, overrides)
    assert flags == {"cpu0": EngineFlags(draining=True)}
    [record] = [r for r in caplog.records if "cpu2" in r.getMessage()]
    message = record.getMessage()
    assert f"{overrides}:4" in message
    assert "names no configured engine" in message and "did you mean 'cpu1'" in message
    assert "gpu0, cpu0, cpu1" in message and "syshax save" in message


@pytest.mark.parametrize(
    ("text", "line", "key", "fragment"),
    [
        ("engines:\n  cpu0:\n    drain: true\n", 3, "engines.cpu0.drain", "did you mean 'engines.cpu0.draining'"),
        ("engines:\n  cpu0:\n    draining: yes please\n", 3, "engines.cpu0.draining", "true or false"),
        ("engines:\n  cpu0:\n    enabled: 0\n", 3, "engines.cpu0.enabled", "true or false"),
        ("engines:\n  cpu0: true\n", 2, "engines.cpu0", "mapping of flags"),
        ("engines: [cpu0]\n", 1, "engines", "map engine names"),
    ],
)
def test_a_malformed_engines_section_is_an_error_naming_file_and_line(
    config: Path, overrides: Path, text: str, line: int, key: str, fragment: str
) -> None:
    write(overrides, text)
    with pytest.raises(ConfigError) as err:
        load(config, overrides)
    assert err.value.source == f"{overrides}:{line}"
    assert err.value.key == key
    assert fragment in err.value.message


def test_engines_in_the_admins_file_is_still_an_unknown_key(tmp_path: Path, overrides: Path) -> None:
    # Engine flags belong to the running daemon; the YAML file describes engines under services.
    path = tmp_path / "config.yaml"
    path.write_text("engines:\n  cpu0:\n    draining: true\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key 'engines'"):
        load(path, overrides)
