"""Profiles: every shipped file loads, every number names its source, mistakes are reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.profile import ProfileError, load_profile, parse_profile, profile_names, sources

SHIPPED = ["cpu-kunpeng920-q4", "cpu-kunpeng920-q8", "gpu-a100", "gpu-a100-40g", "null", "tiny"]


def test_every_required_profile_ships() -> None:
    assert set(SHIPPED) <= set(profile_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_loads_with_a_source_for_every_number(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.kv_capacity_tokens > 0
    numbered = sources(name)
    assert len(numbered) >= 25
    assert all(text.strip() for text in numbered.values())


def test_cpu_profiles_say_they_are_estimates() -> None:
    for name in ("cpu-kunpeng920-q4", "cpu-kunpeng920-q8"):
        profile = load_profile(name)
        assert profile.device == "cpu"
        assert "estimate" in profile.summary
        assert "[est]" in sources(name)["hardware.memory_bandwidth"]


def test_the_40g_pair_has_far_less_kv_room_than_the_80g_pair() -> None:
    assert load_profile("gpu-a100-40g").kv_capacity_tokens * 2 < load_profile("gpu-a100").kv_capacity_tokens


def test_q8_weights_are_larger_than_q4() -> None:
    assert load_profile("cpu-kunpeng920-q8").weight_bytes > load_profile("cpu-kunpeng920-q4").weight_bytes


def _raw(name: str) -> dict[str, object]:
    text = (Path(__file__).parents[2] / "sim/profiles" / f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def test_a_number_without_a_source_is_refused() -> None:
    data = _raw("tiny")
    data["hardware"]["peak_flops"] = {"value": 1e12}  # type: ignore[index]
    with pytest.raises(ProfileError, match=r"hardware.peak_flops: every number needs a source"):
        parse_profile(data, "x.yaml")


def test_a_bare_number_is_refused() -> None:
    data = _raw("tiny")
    data["engine"]["block_size"] = 16  # type: ignore[index]
    with pytest.raises(ProfileError, match=r"engine.block_size: write numbers as"):
        parse_profile(data, "x.yaml")


def test_an_efficiency_above_one_is_refused() -> None:
    data = _raw("tiny")
    data["hardware"]["memory_efficiency"] = {"value": 1.5, "source": "wishful"}  # type: ignore[index]
    with pytest.raises(ProfileError, match="fraction"):
        parse_profile(data, "x.yaml")


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(ProfileError, match="choose one of: .*gpu-a100"):
        load_profile("gpu-h100")


def test_a_profile_file_path_loads(tmp_path: Path) -> None:
    data = _raw("tiny")
    data["name"] = "mine"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_profile(str(path)).name == "mine"


def test_missing_profile_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(str(tmp_path / "absent.yaml"))


def test_variant_changes_fields_and_rejects_unknown_ones() -> None:
    one_card = load_profile("gpu-a100").variant(devices=1)
    assert one_card.devices == 1
    with pytest.raises(ProfileError, match="unknown profile field"):
        load_profile("gpu-a100").variant(cards=1)
