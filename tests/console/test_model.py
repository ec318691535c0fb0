"""The console's pure rules: what each hotkey sends, history buffers, core folding."""

from __future__ import annotations

import typing

import pytest

from console.model import (
    AUTO_PD,
    CPU_BATCH,
    GPU_BATCH,
    GPU_CACHE_THRESHOLD,
    MAX_NUM_SEQS,
    POLICIES,
    POLICY,
    History,
    apply_change,
    auto_pd_patch,
    batch_limit,
    batch_patch,
    describe_change,
    drain_patch,
    engines_of,
    fold_cores,
    kv_threshold,
    next_policy,
    policy_patch,
    ranges,
    resample,
    row_width,
)
from syshaxd.config import RUNTIME_KEYS, PolicyName
from syshaxd.schema import ConfigChangeModel, EngineStateModel, HostModel, NumaNodeModel, StateModel
from tests.console.fakedaemon import generated_state, recorded_state


def test_every_key_the_console_writes_is_a_runtime_key_of_the_daemon() -> None:
    for key in (POLICY, AUTO_PD, GPU_BATCH, MAX_NUM_SEQS, CPU_BATCH, GPU_CACHE_THRESHOLD):
        assert key in RUNTIME_KEYS


def test_policy_cycle_covers_every_policy_the_daemon_knows() -> None:
    assert set(POLICIES) == set(typing.get_args(PolicyName))
    seen = []
    current = POLICIES[0]
    for _ in POLICIES:
        current = next_policy(current)
        seen.append(current)
    assert sorted(seen) == sorted(POLICIES)
    assert next_policy("adaptive") == "classic"
    assert next_policy("round-robin") == "adaptive"
    assert next_policy("no-such-policy") == POLICIES[0]


@pytest.mark.parametrize(
    ("config", "device", "delta", "expected"),
    [
        ({GPU_BATCH: None, MAX_NUM_SEQS: 16}, "gpu", 1, {GPU_BATCH: 17}),  # null starts from max_num_seqs
        ({GPU_BATCH: None, MAX_NUM_SEQS: 16}, "gpu", -1, {GPU_BATCH: 15}),
        ({GPU_BATCH: 24, MAX_NUM_SEQS: 16}, "gpu", 1, {GPU_BATCH: 25}),
        ({CPU_BATCH: 20}, "cpu", -1, {CPU_BATCH: 19}),
        ({CPU_BATCH: 0}, "cpu", -1, {CPU_BATCH: -1}),  # the daemon refuses it, with its reason
        ({}, "cpu", 1, None),  # unknown limit: nothing to move
    ],
)
def test_batch_patch(config: dict[str, object], device: str, delta: int, expected: object) -> None:
    assert batch_patch(config, device, delta) == expected  # type: ignore[arg-type]


def test_batch_limit_prefers_the_explicit_gpu_limit() -> None:
    assert batch_limit({GPU_BATCH: 8, MAX_NUM_SEQS: 16}, "gpu") == 8
    assert batch_limit({GPU_BATCH: None, MAX_NUM_SEQS: 16}, "gpu") == 16
    assert batch_limit({CPU_BATCH: True}, "cpu") is None  # a bool is not a limit


def test_toggle_and_drain_patches_flip_the_current_value() -> None:
    assert auto_pd_patch({AUTO_PD: False}) == {AUTO_PD: True}
    assert auto_pd_patch({AUTO_PD: True}) == {AUTO_PD: False}
    assert policy_patch({POLICY: "classic"}) == {POLICY: "gpu-only"}
    engine = EngineStateModel(name="cpu0", device="cpu", url="u", dialect="llamacpp", state="up")
    assert drain_patch(engine) == {"engines.cpu0.draining": True}
    assert drain_patch(engine.model_copy(update={"draining": True})) == {"engines.cpu0.draining": False}


def test_kv_threshold_is_a_fraction_of_the_percent_key_and_gpu_only() -> None:
    assert kv_threshold({GPU_CACHE_THRESHOLD: 90.0}, "gpu") == pytest.approx(0.9)
    assert kv_threshold({GPU_CACHE_THRESHOLD: 90.0}, "cpu") is None
    assert kv_threshold({GPU_CACHE_THRESHOLD: 250}, "gpu") == 1.0
    assert kv_threshold({}, "gpu") is None


def test_apply_change_updates_config_engine_flags_and_conductor() -> None:
    state = recorded_state()
    change = ConfigChangeModel(changed={POLICY: "classic", AUTO_PD: True, CPU_BATCH: 7},
                               engines={"cpu0": {"draining": True}})  # fmt: skip
    after = apply_change(state, change)
    assert after.config[CPU_BATCH] == 7 and after.config[POLICY] == "classic"
    assert after.conductor.policy == "classic" and after.conductor.auto_pd_offload is True
    assert next(e for e in after.engines if e.name == "cpu0").draining is True
    assert next(e for e in after.engines if e.name == "gpu0") == next(e for e in state.engines if e.name == "gpu0")
    assert state.config[CPU_BATCH] != 7  # the original is untouched


def test_describe_change_names_what_changed() -> None:
    text = describe_change(ConfigChangeModel(changed={CPU_BATCH: 21}, engines={"gpu1": {"draining": False}}))
    assert "cpu_max_batch_size = 21" in text and "gpu1 draining = off" in text
    assert describe_change(ConfigChangeModel(source="reload")) == "reloaded: nothing changed"
    assert "saved 2 runtime values" in describe_change(ConfigChangeModel(changed={POLICY: "a", AUTO_PD: 1}, source="save"))
    saved = ConfigChangeModel(changed={POLICY: "a"}, engines={"cpu0": {"draining": True}}, source="save")
    assert describe_change(saved).startswith("saved 1 runtime values and the flags of 1 engine(s)")


def test_engines_of_groups_by_device_in_daemon_order() -> None:
    state = generated_state(8, 5)
    assert [e.name for e in engines_of(state, "gpu")] == ["gpu0", "gpu1", "gpu2"]
    assert [e.name for e in engines_of(state, "cpu")] == ["cpu0", "cpu1"]
    assert engines_of(None, "gpu") == ()


def _state_at(t: float, decode: float) -> StateModel:
    engine = EngineStateModel(name="gpu0", device="gpu", url="u", dialect="vllm-v1", state="up", decode_tps=decode)
    return StateModel(version="x", uptime=1, time=t, engines=[engine])


def test_history_samples_at_most_once_per_interval_and_is_capped() -> None:
    history = History(interval=2.0, cap=3)
    for t, value in [(0, 1), (1, 99), (2, 2), (4, 3), (6, 4)]:
        history = history.push(_state_at(t, value))
    assert history.decode["gpu0"] == (2.0, 3.0, 4.0)  # t=1 too soon, t=0 dropped by the cap


def test_history_treats_a_missing_rate_as_zero_and_survives_a_daemon_restart() -> None:
    history = History(interval=1.0).push(_state_at(100, 5))
    history = history.push(_state_at(0.5, None))  # type: ignore[arg-type]  # new daemon, clock went back
    assert history.decode["gpu0"] == (5.0, 0.0)


def test_resample_keeps_short_series_and_averages_long_ones() -> None:
    assert resample([1, 2, 3], 5) == (1, 2, 3)
    assert resample([1, 3, 5, 7], 2) == (2, 6)
    assert len(resample(list(range(150)), 17)) == 17
    assert resample([], 10) == () and resample([1], 0) == ()


def _host(cores: int, nodes: int) -> HostModel:
    per = cores // nodes
    return HostModel(
        cpu_percent=[float(c % 100) for c in range(cores)],
        numa_nodes=[NumaNodeModel(id=n, cpus=list(range(n * per, (n + 1) * per))) for n in range(nodes)],
        bound_cpus=list(range(per)),
    )


@pytest.mark.parametrize(("cores", "nodes", "width"), [(160, 4, 41), (160, 4, 30), (160, 2, 70), (160, 1, 72),
                                                       (8, 1, 60), (256, 8, 38), (6, 2, 2)])  # fmt: skip
def test_fold_shows_every_core_once_within_the_width(cores: int, nodes: int, width: int) -> None:
    layout = fold_cores(_host(cores, nodes), width)
    shown = [core.cpu for node in layout.nodes for row in node.rows for core in row]
    assert sorted(shown) == list(range(cores))
    for node in layout.nodes:
        lengths = [len(row) for row in node.rows]
        assert all(row_width(n, layout.gaps) <= width for n in lengths)
        assert len(set(lengths[:-1])) <= 1  # every row but the last is full


def test_160_cores_on_an_80_column_terminal_take_one_row_per_node() -> None:
    # 80 columns minus borders and the conductor panel leave about 40 cells for the strip.
    layout = fold_cores(_host(160, 4), 40)
    assert layout.row_count == 4 and layout.per_row == 40


def test_fold_balances_rows_and_adds_gaps_when_they_fit() -> None:
    layout = fold_cores(_host(40, 1), 30)
    assert [len(r) for r in layout.nodes[0].rows] == [20, 20]
    assert layout.gaps  # 20 cells + 2 gaps fit in 30


def test_fold_marks_bound_cores_and_averages_node_utilisation() -> None:
    host = HostModel(cpu_percent=[10.0, 30.0, 50.0, 70.0],
                     numa_nodes=[NumaNodeModel(id=0, cpus=[0, 1]), NumaNodeModel(id=1, cpus=[2, 3])],
                     bound_cpus=[2, 3])  # fmt: skip
    layout = fold_cores(host, 80)
    assert [n.utilisation for n in layout.nodes] == [20.0, 60.0]
    assert [c.bound for n in layout.nodes for r in n.rows for c in r] == [False, False, True, True]


def test_fold_without_numa_layout_shows_one_group_and_unknown_cpus() -> None:
    layout = fold_cores(HostModel(cpu_percent=[5.0, 6.0]), 10)
    assert layout.nodes[0].node is None and layout.row_count == 1
    odd = HostModel(cpu_percent=[1.0], numa_nodes=[NumaNodeModel(id=0, cpus=[0, 5])])
    assert [c.percent for c in fold_cores(odd, 10).nodes[0].rows[0]] == [1.0, None]
    assert fold_cores(HostModel(), 10).nodes == ()


def test_ranges_writes_cpu_lists_like_lscpu() -> None:
    assert ranges([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert ranges([]) == ""
    assert ranges([5]) == "5"
