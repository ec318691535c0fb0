"""docs/configuration.md lists every config key, and its generated tables follow the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from syshaxd.config import RUNTIME_KEYS, Config, iter_keys
from tools import gen_config_doc as gen


def test_the_page_is_up_to_date_with_the_model() -> None:
    page = gen.DOC.read_text(encoding="utf-8")
    assert gen.updated_page(page, gen.render_tables(iter_keys())) == page, (
        "docs/configuration.md is out of date: run python tools/gen_config_doc.py"
    )


def test_every_key_has_a_row_with_its_live_flag() -> None:
    page = gen.DOC.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `")}
    for info in iter_keys():
        assert info.key in rows, f"{info.key} missing from docs/configuration.md"
        live = rows[info.key].split("|")[4].strip()
        assert (live == "yes") == (info.key in RUNTIME_KEYS), info.key


def test_a_new_key_changes_the_tables() -> None:
    class Decider(BaseModel):
        brand_new_knob: int = Field(default=3, description="A knob nobody documented yet")

    class Extended(Config):
        decider: Decider = Field(default_factory=Decider)  # type: ignore[assignment]

    before = gen.render_tables(iter_keys())
    after = gen.render_tables(iter_keys(Extended))
    assert "decider.brand_new_knob" in after and "decider.brand_new_knob" not in before


def test_check_mode_reports_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(f"# Configuration\n\n{gen.BEGIN}\nold table\n{gen.END}\n", encoding="utf-8")
    assert gen.main(["--check", "--doc", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert gen.main(["--doc", str(stale)]) == 0
    assert gen.main(["--check", "--doc", str(stale)]) == 0
    assert "`decider.cpu_max_batch_size`" in stale.read_text(encoding="utf-8")
