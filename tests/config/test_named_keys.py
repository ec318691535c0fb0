"""Named API keys in the config: what is accepted, what is refused and why (never quoting a
secret), and a class rule naming a key, at load, at ``syshax set`` and at reload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from syshaxd.config import (
    ConfigError,
    LoadedConfig,
    display_value,
    get_dotted,
    load_config,
    set_in_file,
    validate,
)
from syshaxd.config.runtime import PatchError, RuntimeConfig
from syshaxd.service.workers import bootstrap

SECRET_A, SECRET_B, SECRET_C = "sk-evals-4f1c9a", "sk-chat-77b2e0", "sk-old-single-91d3"
RULE = {"class": "batch", "api_key": "nightly-evals"}


def _conductor(**keys: Any) -> dict[str, Any]:
    return {"services": {"conductor": keys}}


def _secrets(keys: dict[str, SecretStr]) -> dict[str, str]:
    return {name: secret.get_secret_value() for name, secret in keys.items()}


def test_api_key_is_the_key_named_default_beside_the_named_ones() -> None:
    config = validate(_conductor(api_key=SECRET_C, api_keys={"nightly-evals": SECRET_A, "chat": SECRET_B}))
    assert _secrets(config.services.conductor.named_keys()) == {
        "default": SECRET_C, "nightly-evals": SECRET_A, "chat": SECRET_B}
    assert _secrets(validate(_conductor(api_key=SECRET_C)).services.conductor.named_keys()) == {"default": SECRET_C}
    assert validate({}).services.conductor.named_keys() == {}


@pytest.mark.parametrize(("conductor", "says"), [
    ({"api_keys": {"nightly-evals": SECRET_A, "chat": SECRET_A}},
     "API keys services.conductor.api_keys.nightly-evals and services.conductor.api_keys.chat have the same secret"),
    ({"api_key": SECRET_A, "api_keys": {"chat": SECRET_A}},
     "API keys services.conductor.api_key (named 'default') and services.conductor.api_keys.chat have the same "
     "secret"),
    ({"api_key": SECRET_C, "api_keys": {"default": SECRET_A}},
     "services.conductor.api_key is the key named 'default': set it or services.conductor.api_keys.default, "
     "not both"),
    ({"api_keys": {"chat": ""}}, "services.conductor.api_keys.chat is empty: give a secret"),
    ({"api_keys": {"chat": "   "}}, "services.conductor.api_keys.chat is empty: give a secret"),
    ({"api_key": ""}, "services.conductor.api_key is empty: give a secret"),
    ({"api_keys": {"chat": None}}, "services.conductor.api_keys.chat has no secret"),
    ({"api_keys": {"night evals": SECRET_A}},
     "services.conductor.api_keys: key name 'night evals': letters, digits, '-', '_' and '.' only"),
    ({"api_keys": {"x" * 65: SECRET_A}}, "at most 64"),
    ({"api_keys": [SECRET_A]}, "services.conductor.api_keys must be a mapping of key names to secrets"),
    ({"api_keys": {"chat": 907311}}, "services.conductor.api_keys.chat must be text (quote it in YAML), not a number"),
    ({"api_key": 907311}, "services.conductor.api_key must be text (quote it in YAML), not a number"),
])
def test_a_key_table_that_cannot_name_each_request_is_refused_without_quoting_a_secret(
        conductor: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(_conductor(**conductor), "conf.yaml")
    message = str(caught.value)
    assert says in message
    for secret in (SECRET_A, SECRET_C, "907311"):
        assert secret not in message


@pytest.mark.parametrize(("keys", "says"), [
    ({"api_keys": {"chat": SECRET_B}},
     "service.rules[0] names API key 'nightly-evals', which is not configured; the keys are: chat"),
    ({"api_key": SECRET_C}, "which is not configured; the keys are: default"),
    ({}, "which is not configured; the keys are: none (set services.conductor.api_keys)"),
])
def test_a_rule_naming_a_key_that_is_not_configured_is_refused_at_load(keys: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=r"conf\.yaml") as caught:
        validate({**_conductor(**keys), "service": {"rules": [{"class": "batch", "max_tokens_at_least": 10}, RULE]}},
                 "conf.yaml")
    assert says.replace("rules[0]", "rules[1]") in str(caught.value)
    with_key = validate({**_conductor(api_keys={"nightly-evals": SECRET_A}), "service": {"rules": [RULE]}})
    assert with_key.service.rules[0].api_key == "nightly-evals"


def test_a_file_error_points_at_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_conductor(port=18010, api_keys={"a": SECRET_A, "b": SECRET_A})))
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, locations=())
    assert str(caught.value).startswith(f"{path}:2: API keys services.conductor.api_keys.a and")
    assert SECRET_A not in str(caught.value)


def test_the_cli_prints_every_secret_masked_and_an_edit_that_breaks_the_table_leaves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_conductor(api_keys={"nightly-evals": SECRET_A})))
    shown = display_value(get_dotted(load_config(path, env={}, locations=()).config, "services.conductor.api_keys"))
    assert json.loads(shown) == {"nightly-evals": "********"}
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="have the same secret") as caught:
        set_in_file(path, "services.conductor.api_keys", json.dumps({"nightly-evals": SECRET_A, "chat": SECRET_A}))
    assert "left unchanged" in str(caught.value) and SECRET_A not in str(caught.value)
    assert path.read_bytes() == before
    value = set_in_file(path, "services.conductor.api_keys", json.dumps({"nightly-evals": SECRET_A, "chat": SECRET_B}))
    assert display_value(value) == '{"nightly-evals": "********", "chat": "********"}'


def test_a_key_in_the_environment_is_named_like_one_in_the_file(tmp_path: Path) -> None:
    loaded = load_config(None, env={"SYSHAX_SERVICES__CONDUCTOR__API_KEYS": json.dumps({"ci": SECRET_A}),
                                    "SYSHAX_SERVICES__CONDUCTOR__API_KEY": SECRET_C}, locations=())
    assert _secrets(loaded.config.services.conductor.named_keys()) == {"default": SECRET_C, "ci": SECRET_A}


def test_a_worker_gets_every_key_with_its_secret(tmp_path: Path) -> None:
    config = validate(_conductor(api_key=SECRET_C, api_keys={"nightly-evals": SECRET_A}) | {"service": {"rules": [RULE]}})
    boot = json.loads(bootstrap(config, index=1, own=frozenset(), info="", grace=1.0))
    again = validate(boot["config"])  # as the worker reads its stdin
    assert _secrets(again.services.conductor.named_keys()) == {"default": SECRET_C, "nightly-evals": SECRET_A}


CONFIG = f"""\
services:
  conductor:
    port: 18010
    api_keys:
      nightly-evals: {SECRET_A}
      chat: {SECRET_B}
"""


def _runtime(tmp_path: Path) -> tuple[RuntimeConfig, Path]:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    overrides = tmp_path / "state" / "overrides.yaml"

    def loader(use_overrides: bool) -> LoadedConfig:
        return load_config(path, env={}, overrides_path=overrides, use_overrides=use_overrides)

    return RuntimeConfig(loader(True), ["gpu0", "cpu0"], loader=loader), path


def test_syshax_set_refuses_a_rule_naming_an_unknown_key_and_keeps_the_table(tmp_path: Path) -> None:
    runtime, _ = _runtime(tmp_path)
    before = runtime.config
    with pytest.raises(PatchError) as caught:
        runtime.apply_patch({"service.rules": [{"class": "batch", "api_key": "nightly"}]})
    assert caught.value.key == "service.rules"
    assert caught.value.reason == ("service.rules[0] names API key 'nightly', which is not configured; the keys "
                                   "are: chat, nightly-evals; the table in use is kept")
    assert runtime.config is before
    runtime.apply_patch({"service.rules": [RULE]})
    assert runtime.service().rules[0].api_key == "nightly-evals"


def test_keys_change_only_on_restart(tmp_path: Path) -> None:
    runtime, path = _runtime(tmp_path)
    with pytest.raises(PatchError, match="not a runtime key"):
        runtime.apply_patch({"services.conductor.api_keys": {"x": SECRET_C}})
    path.write_text(CONFIG + f"      ci: {SECRET_C}\n")
    assert runtime.reload().needs_restart == ["services.conductor.api_keys"]
    assert set(runtime.config.services.conductor.named_keys()) == {"nightly-evals", "chat"}


def test_a_reload_whose_rules_name_a_key_the_running_daemon_lacks_changes_nothing(tmp_path: Path) -> None:
    runtime, path = _runtime(tmp_path)
    before = runtime.config
    path.write_text(CONFIG + f"      ci: {SECRET_C}\nservice:\n  rules: [{{class: batch, api_key: ci}}]\n")
    with pytest.raises(ConfigError) as caught:
        runtime.reload()
    assert str(caught.value) == ("service.rules[0] names API key 'ci', which is not configured; the keys are: chat, "
                                 "nightly-evals (in the running daemon: API keys change only on restart)")
    assert runtime.config is before
