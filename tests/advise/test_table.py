"""advise's tables read as an operator reads them: milliseconds below a second, names not keys,
the GPU limit as the engine really runs it."""

from __future__ import annotations

import io

from rich.console import Console

from sim.advise.options import Setting
from sim.advise.table import error_table, options_table
from sim.advise.window import Measured
from syshaxd.schema import AdviceModel, AdviceOption, duration


def _text(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_durations_are_milliseconds_below_a_second() -> None:
    assert [duration(v) for v in (0.0032, 0.0125, 0.214, 1.0, 12.3, None)] == [
        "3.2 ms", "12 ms", "214 ms", "1.00 s", "12.30 s", "-"]


def test_the_gpu_limit_reads_as_what_the_engine_runs() -> None:
    assert Setting("classic", None, 20, False).label(8) == "classic, gpu batch 8 (engine's), cpu batch 20, auto-PD off"
    assert Setting("classic", 64, 20, False).label(8).startswith("classic, gpu batch 64 (engine runs 8),")
    assert Setting("classic", 4, 20, True).label(8) == "classic, gpu batch 4, cpu batch 20, auto-PD on"
    assert Setting("classic", None, 20, False).label() == "classic, gpu batch unset, cpu batch 20, auto-PD off"


def test_the_tables_name_figures_and_show_ties() -> None:
    option = AdviceOption(label="gpu-only", goodput=1.0, throughput=1.0, ttft_p50=0.05, ttft_p99=2.5,
                          tpot_p50=0.0021, tpot_p99=0.0034, output_tps=88.0, current=True)
    tied = AdviceOption(label="classic", goodput=1.0, throughput=1.0, tied=True)
    text = _text(options_table(AdviceModel(made_at=0, requests=40, window_s=20, options=[option, tied],
                                           recommended=0)))
    assert "TTFT p99" in text and "output tokens/s" in text and "tpot_p99" not in text
    assert "50 ms" in text and "2.50 s" in text and "2.1 ms" in text and "3.4 ms" in text
    assert "* ->" in text and "==" in text
    m = Measured(requests=40, completed=40, span=20, goodput=1, throughput=1, output_tps=80, ttft_p50=0.05,
                 ttft_p99=0.3, tpot_p99=0.004, cpu_share=0, tpot_p50=0.003)
    check = _text(error_table(m, m, {"ttft_p50": 0.0}, 0.5))
    assert "self-check" in check and "bound 50%" in check and "TPOT p50" in check and "3.0 ms" in check
