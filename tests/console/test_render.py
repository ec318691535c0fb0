"""The pure renderables: every state in words, bars on a fixed scale, nothing wider than asked."""

from __future__ import annotations

import pytest
from rich.text import Text

from console.model import History, fold_cores
from console.render import (
    bar,
    conductor_panel,
    device_panel,
    fmt_memory,
    fmt_rate,
    heat_glyph,
    numa_label_width,
    numa_panel,
    sparkline,
)
from syshaxd.schema import EngineStateModel, MemoryModel
from tests.console.fakedaemon import generated_state, recorded_state


def lines(text: Text) -> list[str]:
    return text.plain.split("\n")


def test_bar_marks_the_threshold_and_fills_on_a_fixed_scale() -> None:
    text = bar(0.5, 11, threshold=0.9).plain
    assert len(text) == 11 and text.index("┃") == 9
    assert text.count("█") == 5
    assert bar(1.0, 10).plain == "█" * 10 and bar(0.0, 10).plain == "░" * 10
    assert bar(None, 8).plain.strip() == "n/a"


def test_sparkline_is_exactly_as_wide_as_asked_with_newest_at_the_right() -> None:
    assert sparkline([1, 2, 3], 6).plain == "   ▁▅█"
    assert len(sparkline(list(range(300)), 20).plain) == 20
    assert sparkline([5, 5], 3).plain == " ▁▁"  # no range: flat, not an error
    assert sparkline([0.01, 0.0, 0.03], 3).plain == "▁▁▁"  # idle noise is not a shape
    assert sparkline([1000, 1001, 1005], 3).plain == "▁▁▁"
    assert sparkline([0, 10], 2).plain == "▁█"
    assert sparkline([], 4).plain == "    "


@pytest.mark.parametrize(("value", "shown"), [(None, "–"), (3.14, "3.1"), (812.4, "812"), (4100, "4.1k"),
                                              (12_345, "12k"), (2_500_000, "2.5M")])  # fmt: skip
def test_rates_are_short(value: float | None, shown: str) -> None:
    assert fmt_rate(value) == shown


def test_heat_cells_differ_by_glyph_not_only_colour() -> None:
    glyphs = {heat_glyph(p, False)[0] for p in (0, 30, 60, 99)}
    assert len(glyphs) == 4
    assert "underline" in heat_glyph(50, True)[1] and heat_glyph(None, False)[0] == "?"


@pytest.mark.parametrize("width", [34, 37, 60, 78])
def test_device_panel_fits_its_width_and_writes_every_state(width: int) -> None:
    state = recorded_state()
    history = History()
    for t in range(5):
        history = history.push(state.model_copy(update={"time": state.time + 2 * t}))
    engines = tuple(state.engines)
    stale = engines[3].model_copy(update={"state": "stale"})
    down = engines[2].model_copy(update={"state": "down", "last_error": "connection refused"})
    text = device_panel((engines[0], engines[1], down, stale), device="gpu", config=state.config,
                        history=history, selected="gpu1", width=width)  # fmt: skip
    rows = lines(text)
    assert all(len(row) <= width for row in rows)
    assert len(rows) == (16 if width >= 70 else 12)
    joined = "\n".join(rows)
    for word in ("UP", "DOWN", "STALE", "DRAIN", "connection refused", "scrape timed out"):
        assert word in joined
    assert rows[4 if width >= 70 else 3].startswith("▶gpu1")


def test_device_panel_shows_running_against_the_limit_in_force() -> None:
    engine = EngineStateModel(name="gpu0", device="gpu", url="u", dialect="vllm-v1", state="up", running=5)
    config = {"decider.gpu_max_batch_size": None, "decider.max_num_seqs": 16}
    assert "run 5/16" in device_panel((engine,), device="gpu", config=config, history=History(),
                                      selected=None, width=40).plain  # fmt: skip


def test_a_wide_card_says_how_fast_the_engine_prefills_once_it_has_measured_it() -> None:
    engine = EngineStateModel(name="cpu0", device="cpu", url="u", dialect="llamacpp", state="up", running=1)
    measured = engine.model_copy(update={"prefill_speed": 238.4})
    panel = {e.prefill_speed: device_panel((e,), device="cpu", config={}, history=History(), selected=None,
                                           width=100).plain for e in (engine, measured)}  # fmt: skip
    assert "prefills 238 tok/s" in panel[238.4]
    assert "prefills" not in panel[None]


def test_numa_panel_at_80_columns_shows_160_cores_and_the_binding() -> None:
    state = recorded_state()
    width = 48  # the NUMA panel's inside on an 80-column terminal
    labels = numa_label_width(state.host)
    layout = fold_cores(state.host, width - labels)
    rows = lines(numa_panel(state.host, layout, labels, width))
    assert all(len(row) <= width for row in rows)
    assert [row[:2] for row in rows[:4]] == ["N0", "N1", "N2", "N3"]
    cells = sum(len(row[labels:].replace(" ", "")) for row in rows[:4])
    assert cells == 160
    assert "bound 0-39" in rows[-1]


def test_conductor_panel_lists_decisions_by_device_and_mode() -> None:
    stats = generated_state(t=10).conductor
    text = conductor_panel(stats, 28).plain
    assert all(len(row) <= 28 for row in text.split("\n"))
    for word in ("queue", "/100", "req/s", "p50", "p99", "gpu/whole", "cpu/split", "accuracy 91%", "adaptive", "auto-PD off"):
        assert word in text


@pytest.mark.parametrize(("lag", "shown", "style"), [(None, False, ""), (0.004, False, ""),
                                                     (0.35, True, "bold yellow"), (2.5, True, "bold red")])
def test_conductor_panel_warns_when_syshaxd_itself_lags(lag: float | None, shown: bool, style: str) -> None:
    stats = generated_state(t=10).conductor.model_copy(update={"loop_lag_p99": lag, "loop_lag_max": lag})
    text = conductor_panel(stats, 40)
    assert ("loop lag" in text.plain) is shown
    if shown:
        assert f"loop lag {lag:.2f}s" in text.plain
        start = text.plain.index(f"{lag:.2f}s")
        assert any(span.start <= start < span.end and str(span.style) == style for span in text.spans)


def test_memory_says_rss_and_its_growth_since_the_first_ready() -> None:
    mb = 2**20
    assert fmt_memory(MemoryModel()) is None  # an older daemon: nothing to say
    assert fmt_memory(MemoryModel(rss=64 * mb)) == "64 MB"
    assert fmt_memory(MemoryModel(rss=64 * mb, rss_start=62 * mb)) == "64 MB (+3%)"
    assert fmt_memory(MemoryModel(rss=60 * mb, rss_start=64 * mb)) == "60 MB (-6%)"
