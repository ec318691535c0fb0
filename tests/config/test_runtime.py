"""RuntimeConfig: patches all or nothing, engine flags, save to overrides, reload from files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from syshaxd.config import ConfigError, LoadedConfig, load_config
from syshaxd.config.runtime import UNSAVED, PatchError, RuntimeConfig
from syshaxd.schema import ConfigChangeModel

CONFIG = """\
decider:
  policy: classic
  cpu_max_batch_size: 8
services:
  conductor:
    port: 18010
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path, tmp_path / "state" / "overrides.yaml"


def make_runtime(files: tuple[Path, Path]) -> RuntimeConfig:
    path, overrides = files

    def loader(use_overrides: bool) -> LoadedConfig:
        return load_config(path, env={}, overrides_path=overrides, use_overrides=use_overrides)

    return RuntimeConfig(loader(True), ["gpu0", "cpu0"], loader=loader)


def test_patch_changes_limits_and_announces(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    seen: list[ConfigChangeModel] = []
    rt.on_change(seen.append)
    change = rt.apply_patch({"decider.cpu_max_batch_size": 24, "decider.auto_pd_offload": True})
    assert rt.limits().cpu_max_batch_size == 24
    assert rt.limits().auto_pd_offload is True
    assert change.changed == {"decider.cpu_max_batch_size": 24, "decider.auto_pd_offload": True}
    assert seen == [change]
    assert rt.sources()["decider.cpu_max_batch_size"] == UNSAVED


def test_patch_policy_and_engine_flags(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    change = rt.apply_patch({"decider.policy": "gpu-only", "engines.cpu0.draining": True})
    assert rt.policy_name == "gpu-only"
    assert rt.engine_flags("cpu0") == (True, True)
    assert rt.engine_flags("gpu0") == (True, False)
    assert change.engines == {"cpu0": {"enabled": True, "draining": True}}


def test_invalid_multi_key_patch_changes_nothing(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    before = rt.config
    seen: list[ConfigChangeModel] = []
    rt.on_change(seen.append)
    with pytest.raises(PatchError) as err:
        rt.apply_patch({
            "decider.cpu_max_batch_size": 30,
            "engines.gpu0.enabled": False,
            "decider.gpu_cache_threshold": 150,
        })
    assert err.value.key == "decider.gpu_cache_threshold"
    assert "150" in err.value.reason and "100" in err.value.reason
    assert rt.config is before
    assert rt.engine_flags("gpu0") == (True, False)
    assert seen == []


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ({"decider.cpu_max_batch_sise": 3}, "decider.cpu_max_batch_sise", "did you mean 'decider.cpu_max_batch_size'"),
        ({"services.conductor.port": 9000}, "services.conductor.port", "not a runtime key"),
        ({"decider.policy": "fastest"}, "decider.policy", "'classic'"),
        ({"decider.max_num_seqs": "many"}, "decider.max_num_seqs", "integer"),
        ({"engines.cpu9.draining": True}, "engines.cpu9.draining", "did you mean 'cpu0'"),
        ({"engines.cpu0.drain": True}, "engines.cpu0.drain", "did you mean 'engines.cpu0.draining'"),
        ({"engines.cpu0.enabled": "no"}, "engines.cpu0.enabled", "true or false"),
        ({"decider.token_limit_min": 5000}, "decider.token_limit_min", "token_limit_max"),
        ({}, "(body)", "empty patch"),
    ],
)
def test_bad_patches_name_the_key_and_reason(files: tuple[Path, Path], body: dict[str, object], key: str, fragment: str) -> None:
    rt = make_runtime(files)
    with pytest.raises(PatchError) as err:
        rt.apply_patch(body)
    assert err.value.key == key
    assert fragment in err.value.reason


def test_save_writes_only_values_that_differ_from_the_file(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    rt.apply_patch({"decider.cpu_max_batch_size": 12, "decider.policy": "classic"})
    path = rt.save()
    assert path == files[1]
    saved = yaml.safe_load(path.read_text())
    assert saved == {"decider": {"cpu_max_batch_size": 12}}
    assert path.stat().st_mode & 0o777 == 0o640
    assert rt.sources()["decider.cpu_max_batch_size"] == f"overrides {path}"


def test_save_then_reload_round_trip(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    rt.apply_patch({"decider.cpu_max_batch_size": 12})
    rt.save()
    rt.apply_patch({"decider.cpu_max_batch_size": 99})  # not saved: a reload forgets it
    change = rt.reload()
    assert rt.config.decider.cpu_max_batch_size == 12
    assert change.changed == {"decider.cpu_max_batch_size": 12}
    assert change.needs_restart == []
    fresh = make_runtime(files)  # a restarted daemon starts from file + overrides
    assert fresh.config.decider.cpu_max_batch_size == 12


def test_reload_applies_runtime_keys_and_lists_restart_keys(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    path = files[0]
    path.write_text(CONFIG.replace("cpu_max_batch_size: 8", "cpu_max_batch_size: 6").replace("18010", "18011"))
    change = rt.reload()
    assert change.changed == {"decider.cpu_max_batch_size": 6}
    assert change.needs_restart == ["services.conductor.port"]
    assert rt.config.services.conductor.port == 18010  # not applied live
    assert rt.config.decider.cpu_max_batch_size == 6
    assert rt.sources()["decider.cpu_max_batch_size"] == f"file {path}"


def test_reload_of_a_broken_file_changes_nothing(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    before = rt.config
    files[0].write_text("decider:\n  cpu_max_batch_size: -4\n")
    with pytest.raises(ConfigError, match="cpu_max_batch_size"):
        rt.reload()
    assert rt.config is before


def test_a_failing_listener_does_not_undo_the_change(files: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    rt = make_runtime(files)

    def broken(_: ConfigChangeModel) -> None:
        raise RuntimeError("boom")

    unsubscribe = rt.on_change(broken)
    rt.apply_patch({"decider.max_num_seqs": 4})
    assert rt.limits().max_num_seqs == 4
    assert "listener failed" in caplog.text
    unsubscribe()
    rt.apply_patch({"decider.max_num_seqs": 5})
    assert caplog.text.count("listener failed") == 1


def test_save_keeps_engine_flags_and_a_restart_starts_with_them(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    seen: list[ConfigChangeModel] = []
    rt.on_change(seen.append)
    rt.apply_patch({"engines.cpu0.draining": True, "engines.gpu0.enabled": False})
    path = rt.save()
    assert yaml.safe_load(path.read_text()) == {"engines": {"cpu0": {"draining": True}, "gpu0": {"enabled": False}}}
    expected = {"cpu0": {"enabled": True, "draining": True}, "gpu0": {"enabled": False, "draining": False}}
    assert rt.last_saved_engines == expected
    assert seen[-1].source == "save" and seen[-1].engines == expected
    fresh = make_runtime(files)  # a restarted daemon
    assert fresh.engine_flags("cpu0") == (True, True)
    assert fresh.engine_flags("gpu0") == (False, False)


def test_saving_a_re_enabled_engine_removes_its_flags(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    rt.apply_patch({"engines.cpu0.draining": True})
    rt.save()
    rt.apply_patch({"engines.cpu0.draining": False})
    path = rt.save()
    assert yaml.safe_load(path.read_text()) == {}
    assert rt.last_saved_engines == {}
    assert make_runtime(files).engine_flags("cpu0") == (True, False)


def test_reload_applies_the_saved_flags_and_forgets_unsaved_ones(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    rt.apply_patch({"engines.cpu0.draining": True})
    rt.save()
    rt.apply_patch({"engines.cpu0.draining": False, "engines.gpu0.enabled": False})  # not saved
    change = rt.reload()
    assert rt.engine_flags("cpu0") == (True, True)
    assert rt.engine_flags("gpu0") == (True, False)
    assert change.engines == {
        "cpu0": {"enabled": True, "draining": True},
        "gpu0": {"enabled": True, "draining": False},
    }
    assert rt.reload().engines == {}  # nothing changed the second time


def test_reload_picks_up_flags_written_to_the_overrides_file(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    files[1].parent.mkdir(parents=True, exist_ok=True)
    files[1].write_text("engines:\n  gpu0:\n    enabled: false\n")
    change = rt.reload()
    assert rt.engine_flags("gpu0") == (False, False)
    assert change.engines == {"gpu0": {"enabled": False, "draining": False}}


def test_a_reloaded_class_table_is_models_the_conductor_can_read(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    files[0].write_text(CONFIG + "service:\n  classes:\n    interactive: {}\n    eval: {ttft_ms: 90000, priority: 3}\n"
                        "  rules: [{class: eval, model: 'eval-*'}]\n")
    change = rt.reload()
    assert set(change.changed) == {"service.classes", "service.rules"}
    levels = rt.service().levels()  # a dict of plain data here failed at the next request
    assert levels["eval"].ttft == 90.0 and levels["eval"].priority == 3
    assert rt.service().rules[0].class_ == "eval"


def test_a_class_table_no_engine_can_serve_is_refused_and_the_old_one_kept(files: tuple[Path, Path]) -> None:
    rt = make_runtime(files)
    rt.check_service_with(lambda: {"gpu0": 0.02, "cpu0": 0.15})
    before = rt.service()
    with pytest.raises(PatchError) as refused:
        rt.apply_patch({"service.classes": {"interactive": {}, "rush": {"tpot_ms": 5}}})
    assert refused.value.key == "service.classes"
    assert "class 'rush' asks for 5 ms per token; the fastest engine (gpu0) decodes one request at 20 ms" in str(
        refused.value)
    assert rt.service() is before
    rt.apply_patch({"service.classes": {"interactive": {}, "rush": {"tpot_ms": 25}}})
    assert rt.service().classes["rush"].tpot_ms == 25
