"""Mooncake-format traces: the reader, its errors, and the scheduling benchmark's replay of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import _workloads
from sim.traces import TraceError, TraceRequest, load_trace, read_mooncake

GOOD = [
    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": list(range(46, 58)) + [2353, 2354]},
    {"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": list(range(46, 58)) + [2366]},
    {"timestamp": 28000, "input_length": 100, "output_length": 0, "extra": "ignored"},
    {"timestamp": 31000, "input_length": 1025, "output_length": 3, "hash_ids": [7, 8, 9]},
]


def write(tmp_path: Path, rows: list[object], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_a_good_file_gives_arrivals_in_seconds_lengths_and_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, [GOOD[0], "", GOOD[1], GOOD[2], GOOD[3]])
    got = read_mooncake(path)
    assert [r.arrival for r in got] == [0.0, pytest.approx(0.518), pytest.approx(3.053), pytest.approx(3.518)]
    assert got[0] == TraceRequest(0.0, 6955, 52, tuple(GOOD[0]["hash_ids"]), 512)  # type: ignore[arg-type]
    assert got[1] == TraceRequest(pytest.approx(0.518), 100, 1, (), 512)  # type: ignore[arg-type]
    assert got[2].prefix[:12] == got[0].prefix[:12] and got[2].prefix[12] != got[0].prefix[12]
    assert got[3].prefix == (7, 8, 9)  # 1025 tokens: two whole blocks and one of a single token
    assert len(read_mooncake(path, limit=2)) == 2


def test_load_trace_reads_jsonl_and_rescales_to_a_rate(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD[:3])
    got = load_trace(str(path), rate=1.0)
    assert [r.arrival for r in got] == [0.0, pytest.approx(2 * 0.518 / 3.053), pytest.approx(2.0)]
    assert got[-1].prefix == tuple(GOOD[1]["hash_ids"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("line", "says"), [
    ('{"timestamp": 1, "input_length": 10', "not a JSON object"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"input_length": 10, "output_length": 1}', "'timestamp' must be milliseconds >= 0, got None"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 1}', "'timestamp' must be milliseconds >= 0"),
    ('{"timestamp": 1, "output_length": 1}', "'input_length' must be a whole number >= 0, got None"),
    ('{"timestamp": 1, "input_length": "10", "output_length": 1}', "'input_length' must be a whole number"),
    ('{"timestamp": 1, "input_length": 10, "output_length": -1}', "'output_length' must be a whole number >= 0"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1, "a"]}', "'hash_ids' must be a list"),
    ('{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2, 3]}',
     "3 hash_ids for input_length 1024: more than its 2 blocks of 512 tokens"),
])
def test_a_malformed_line_is_named_with_what_is_wrong(tmp_path: Path, line: str, says: str) -> None:
    path = write(tmp_path, [GOOD[0], line, GOOD[1]])
    with pytest.raises(TraceError) as info:
        read_mooncake(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert says in str(info.value)


def test_an_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="has no requests"):
        read_mooncake(write(tmp_path, ["", " "]))
    with pytest.raises(TraceError, match="cannot read trace"):
        read_mooncake(tmp_path / "absent.jsonl")


def test_the_benchmark_replays_a_window_with_its_blocks_at_the_offered_rate(tmp_path: Path) -> None:
    rows = [{"timestamp": 500 * i * i, "input_length": 1100 + i, "output_length": 10 + i,
             "hash_ids": [0, 1, 100 + i]} for i in range(20)]
    rows[5]["input_length"] = 20_000  # cut to the context: keeps the ids of the blocks left
    rows[5]["hash_ids"] = list(range(40))
    name = f"{_workloads.MOONCAKE}{write(tmp_path, rows)}"
    assert _workloads.choose(f"azure-conv,{name}") == ["azure-conv", name]
    source = _workloads.load(name, tmp_path)
    assert source.lengths[5] == (_workloads.CONTEXT_LIMIT - 15, 15)
    assert source.prefixes[5] == tuple(range(-(-(_workloads.CONTEXT_LIMIT - 15) // 512)))
    reqs = _workloads.requests_at(source, rate=2.0, count=8, seed=3)
    assert len(reqs) == 8 and (len(reqs) - 1) / reqs[-1].arrival == pytest.approx(2.0)
    first = source.lengths.index((reqs[0].prompt_tokens, reqs[0].output_tokens))
    assert [r.prefix for r in reqs] == list(source.prefixes[first:first + 8])
    assert all(r.prefix[:2] == (0, 1) for r in reqs if r.prefix != source.prefixes[5])


def test_the_benchmark_refuses_unknown_workloads_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown workload nope"):
        _workloads.choose("nope")
    with pytest.raises(ValueError, match="no such trace file"):
        _workloads.choose(f"{_workloads.MOONCAKE}{tmp_path / 'absent.jsonl'}")
    bad = write(tmp_path, [GOOD[0], '{"timestamp": 1}'])
    with pytest.raises(_workloads.WorkloadError, match=f"{bad}:2: 'input_length'"):
        _workloads.load(f"{_workloads.MOONCAKE}{bad}", tmp_path)
