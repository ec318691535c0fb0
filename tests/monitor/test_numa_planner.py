"""The NUMA planner on fake sysfs trees: plans, --cores, uneven nodes, offline CPUs, --check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from syshaxd.cli import main as cli_main
from syshaxd.monitor.host import format_cpulist
from syshaxd.monitor.numa import (
    RULE_EQUAL,
    RULE_ONLINE,
    RULE_THREADS,
    PlanError,
    check_binding,
    parse_check_arg,
    plan_binding,
    read_topology,
)


def fake_sysfs(
    root: Path,
    nodes: Sequence[Sequence[int]],
    offline: Sequence[int] = (),
    smt_pairs: Sequence[tuple[int, int]] = (),
) -> Path:
    """Write a sysfs tree: node<i>/cpulist per node, cpu/online, cpu/present, thread siblings."""
    sysfs = root / "sys"
    node_root = sysfs / "devices" / "system" / "node"
    cpu_root = sysfs / "devices" / "system" / "cpu"
    every = sorted(c for cpus in nodes for c in cpus)
    for i, cpus in enumerate(nodes):
        d = node_root / f"node{i}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(format_cpulist(cpus) + "\n")
        (d / "meminfo").write_text(f"Node {i} MemTotal:       1048576 kB\nNode {i} MemFree:        524288 kB\n")
    cpu_root.mkdir(parents=True, exist_ok=True)
    (cpu_root / "present").write_text(format_cpulist(every) + "\n")
    (cpu_root / "online").write_text(format_cpulist([c for c in every if c not in offline]) + "\n")
    siblings = {c: [c] for c in every}
    for a, b in smt_pairs:
        siblings[a] = siblings[b] = [a, b]
    for cpu, sib in siblings.items():
        topo = cpu_root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(format_cpulist(sib) + "\n")
    return sysfs


def kunpeng(tmp_path: Path) -> Path:
    """4 NUMA nodes x 40 cores, no SMT: the sysHAX guide's Kunpeng 920."""
    return fake_sysfs(tmp_path, [range(n * 40, n * 40 + 40) for n in range(4)])


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(["numa", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_kunpeng_plan_binds_all_160_cores(tmp_path: Path) -> None:
    binding = plan_binding(read_topology(kunpeng(tmp_path)))
    assert binding.vllm_env()["OMP_NUM_THREADS"] == "160"
    assert binding.vllm_env()["CUSTOM_CPU_AFFINITY"] == "0-159"
    assert binding.nodes == (0, 1, 2, 3)
    assert binding.per_node == 40


def test_cli_prints_the_sysHAX_environment_and_llamacpp_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--sysfs", str(kunpeng(tmp_path)))
    assert code == 0
    assert "OMP_NUM_THREADS=160 CUSTOM_CPU_AFFINITY=0-159" in out
    assert "numactl --physcpubind=0-159 --interleave=0-3" in out
    assert "--threads 160" in out


def test_cores_spreads_evenly_over_nodes(tmp_path: Path) -> None:
    binding = plan_binding(read_topology(kunpeng(tmp_path)), cores=100)
    assert binding.threads == 100
    assert binding.per_node == 25
    assert binding.cpulist == "0-24,40-64,80-104,120-144"


def test_cores_not_divisible_rounds_down_and_says_so(tmp_path: Path) -> None:
    binding = plan_binding(read_topology(kunpeng(tmp_path)), cores=30)
    assert binding.threads == 28
    assert any("asked for 30" in n for n in binding.notes)


def test_fewer_cores_than_nodes_uses_fewer_nodes(tmp_path: Path) -> None:
    binding = plan_binding(read_topology(kunpeng(tmp_path)), cores=2)
    assert binding.cpus == (0, 40)


def test_too_many_cores_is_refused_with_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(PlanError, match="at most 160"):
        plan_binding(read_topology(kunpeng(tmp_path)), cores=161)
    code, _, err = run_cli(capsys, "--sysfs", str(kunpeng(tmp_path / "b")), "--cores", "200")
    assert code == 1
    assert "at most 160" in err


def test_uneven_nodes_take_the_smallest_node_count(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, [range(0, 40), range(40, 72)])
    binding = plan_binding(read_topology(sysfs))
    assert binding.per_node == 32
    assert binding.cpulist == "0-31,40-71"
    assert any("node 0 offers 40 CPUs" in n for n in binding.notes)


def test_offline_cpus_are_never_bound(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, [range(0, 8), range(8, 16)], offline=[3, 12, 13])
    binding = plan_binding(read_topology(sysfs))
    assert 3 not in binding.cpus and 12 not in binding.cpus
    assert binding.per_node == 6  # node 1 has 6 online CPUs left
    assert check_binding(read_topology(sysfs), binding.cpus, binding.threads) == []


def test_smt_siblings_left_out_unless_asked(tmp_path: Path) -> None:
    # 2 nodes x 4 cores x 2 threads; siblings are n and n+8 as on x86.
    nodes = [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    sysfs = fake_sysfs(tmp_path, nodes, smt_pairs=[(c, c + 8) for c in range(8)])
    topo = read_topology(sysfs)
    assert plan_binding(topo).cpulist == "0-7"
    assert plan_binding(topo, smt=True).threads == 16


def test_check_accepts_a_binding_that_follows_the_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--sysfs", str(kunpeng(tmp_path)), "--check", "0-159")
    assert code == 0
    assert "OK" in out


def test_check_names_the_equal_per_node_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sysfs = kunpeng(tmp_path)
    violations = check_binding(read_topology(sysfs), list(range(0, 140)))
    assert [v.rule for v in violations] == [RULE_EQUAL]
    assert "node 3: 20" in violations[0].detail
    code, out, _ = run_cli(capsys, "--sysfs", str(sysfs), "--check", "0-139")
    assert code == 1
    assert "equal-per-node" in out and "node 3: 20" in out


def test_check_names_the_threads_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sysfs = kunpeng(tmp_path)
    code, out, _ = run_cli(capsys, "--sysfs", str(sysfs), "--check", "OMP_NUM_THREADS=128 CUSTOM_CPU_AFFINITY=0-159")
    assert code == 1
    assert "'threads'" in out and "128 threads for 160 bound CPUs" in out
    code, out, _ = run_cli(capsys, "--sysfs", str(sysfs), "--check", "0-159", "--threads", "160")
    assert code == 0


def test_check_names_offline_and_missing_cpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sysfs = fake_sysfs(tmp_path, [range(0, 8), range(8, 16)], offline=[5])
    topo = read_topology(sysfs)
    rules = [v.rule for v in check_binding(topo, [4, 5, 6, 12, 13])]
    assert rules == [RULE_ONLINE]
    code, out, _ = run_cli(capsys, "--sysfs", str(sysfs), "--check", "0-7,8-15,16", "--json")
    report = json.loads(out)
    assert code == 1
    details = [v["detail"] for v in report["violations"]]
    assert any("CPU 16 does not exist" in d for d in details)
    assert any("CPU 5 is offline" in d for d in details)


def test_check_reports_every_broken_rule_at_once(tmp_path: Path) -> None:
    topo = read_topology(kunpeng(tmp_path))
    rules = [v.rule for v in check_binding(topo, [*range(0, 30), *range(40, 50), 200], threads=8)]
    assert rules == [RULE_ONLINE, RULE_EQUAL, RULE_THREADS]


def test_bad_check_argument_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--sysfs", str(kunpeng(tmp_path)), "--check", "0-x")
    assert code == 2
    assert "0-x" in err
    with pytest.raises(ValueError, match="unknown setting"):
        parse_check_arg("FOO=1 CUSTOM_CPU_AFFINITY=0-3")


def test_json_plan_for_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--sysfs", str(kunpeng(tmp_path)), "--cores", "80", "--json")
    plan = json.loads(out)
    assert code == 0
    assert plan["threads"] == 80
    assert plan["env"]["CUSTOM_CPU_AFFINITY"] == "0-19,40-59,80-99,120-139"
