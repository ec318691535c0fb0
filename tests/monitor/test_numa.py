"""NUMA topology and cpulists on fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from syshaxd.monitor.host import (
    CpulistError,
    HostSampler,
    format_cpulist,
    parse_cpulist,
    read_numa_topology,
)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0", (0,)),
        ("0-3", (0, 1, 2, 3)),
        ("0-1,4,6-7\n", (0, 1, 4, 6, 7)),
        ("", ()),
        ("\n", ()),
        ("3,1,2,1", (1, 2, 3)),
    ],
)
def test_parse_cpulist(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "-3", "5-2", "1,,x", "0-3:2"])
def test_parse_cpulist_rejects_bad_text_naming_the_part(text: str) -> None:
    with pytest.raises(CpulistError, match="cpulist"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([], ""),
        ([5], "5"),
        ([0, 1, 2, 3], "0-3"),
        ([3, 2, 1, 0, 8, 10, 11], "0-3,8,10-11"),
        ([*range(0, 40), *range(80, 120)], "0-39,80-119"),
    ],
)
def test_format_cpulist(cpus: list[int], text: str) -> None:
    assert format_cpulist(cpus) == text
    assert parse_cpulist(text) == tuple(sorted(cpus))


def make_tree(tmp_path: Path, nodes: dict[int, str], online: str | None, mem_kb: int = 1024) -> Path:
    system = tmp_path / "sys" / "devices" / "system"
    for node_id, cpulist in nodes.items():
        d = system / "node" / f"node{node_id}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
        (d / "meminfo").write_text(
            f"Node {node_id} MemTotal:       {mem_kb * (node_id + 1)} kB\n"
            f"Node {node_id} MemFree:        {mem_kb // 2} kB\n"
            f"Node {node_id} MemUsed:        {mem_kb // 2} kB\n"
        )
    (system / "node").mkdir(parents=True, exist_ok=True)
    (system / "node" / "possible").write_text("0-3\n")  # not a node directory: ignored
    if online is not None:
        (system / "cpu").mkdir(parents=True, exist_ok=True)
        (system / "cpu" / "online").write_text(online + "\n")
    return system / "node"


def test_one_node(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-7"}, online="0-7")
    (node,) = read_numa_topology(root)
    assert node.id == 0 and node.cpus == tuple(range(8))
    assert node.mem_total == 1024 * 1024 and node.mem_free == 512 * 1024


def test_kunpeng_920_four_nodes_of_40_cores(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-39", 1: "40-79", 2: "80-119", 3: "120-159"}, online="0-159")
    nodes = read_numa_topology(root)
    assert [n.id for n in nodes] == [0, 1, 2, 3]
    assert [format_cpulist(n.cpus) for n in nodes] == ["0-39", "40-79", "80-119", "120-159"]
    assert all(len(n.cpus) == 40 for n in nodes)
    assert nodes[3].mem_total == 4 * 1024 * 1024


def test_nodes_sorted_numerically_not_by_name(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {i: str(i) for i in range(11)}, online="0-10")
    assert [n.id for n in read_numa_topology(root)] == list(range(11))


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-3", 1: "4-7"}, online="0-2,4,6-7")
    nodes = read_numa_topology(root)
    assert nodes[0].cpus == (0, 1, 2)
    assert nodes[1].cpus == (4, 6, 7)


def test_node_with_all_cpus_offline_is_kept_empty(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-3", 1: "4-7"}, online="0-3")
    nodes = read_numa_topology(root)
    assert nodes[1].id == 1 and nodes[1].cpus == ()


def test_missing_online_file_keeps_node_cpulists(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-1", 1: "2-3"}, online=None)
    assert [n.cpus for n in read_numa_topology(root)] == [(0, 1), (2, 3)]


def test_missing_node_directory_is_one_node_with_every_online_cpu(tmp_path: Path) -> None:
    cpu = tmp_path / "sys" / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-5,8\n")
    (node,) = read_numa_topology(tmp_path / "sys" / "devices" / "system" / "node")
    assert node.id == 0
    assert node.cpus == (0, 1, 2, 3, 4, 5, 8)
    assert node.mem_total == psutil.virtual_memory().total


def test_missing_everything_falls_back_to_the_cpu_count(tmp_path: Path) -> None:
    (node,) = read_numa_topology(tmp_path / "nothing" / "node")
    assert len(node.cpus) >= 1 and node.cpus == tuple(range(len(node.cpus)))


def test_host_sampler_on_fake_tree(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {0: "0-3", 1: "4-7"}, online="0-7")
    sampler = HostSampler(node_root=root, bound_cpus=lambda: (4, 5), use_nvml=False)
    view = sampler.sample()
    sampler.close()
    assert [n.id for n in view.numa_nodes] == [0, 1]
    assert view.bound_cpus == (4, 5)
    assert view.mem_total > 0 and 0 <= view.mem_used <= view.mem_total
    assert view.gpus == ()
    assert all(0.0 <= p <= 100.0 for p in view.cpu_percent)
