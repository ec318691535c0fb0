"""Regenerate the key tables of docs/configuration.md from the config model.

The tables sit between two marker comments; everything else in the page is written by
hand. ``--check`` exits 1 (and says what to run) when the page is out of date, which
is what the test in tests/demo/test_config_doc.py does.

    python tools/gen_config_doc.py           # rewrite the tables in docs/configuration.md
    python tools/gen_config_doc.py --check   # exit 1 when they differ from the model
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from syshaxd.config import RUNTIME_KEYS, KeyInfo, iter_keys

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
BEGIN = "<!-- BEGIN GENERATED KEY TABLES: python tools/gen_config_doc.py -->"
END = "<!-- END GENERATED KEY TABLES -->"

#: Section headings in the order of the config file, with one line on what each is for.
SECTIONS: dict[str, str] = {
    "services.gpu": "The GPU inference engine (usually vLLM).",
    "services.cpu": "The CPU inference engine (a CPU build of vLLM, or llama.cpp's `llama-server`).",
    "services.conductor": "syshax's own OpenAI-compatible API.",
    "services.conductor.limits": "What one client may hold on the API port: timeouts, sizes, connections "
                                 "(the security section of docs/reliability.md).",
    "models": "The served model and the startup test generation.",
    "system": "Admission queue, timeouts and the graceful stop (see docs/reliability.md).",
    "decider": "The scheduling policy and its limits. Every key here can change while the daemon runs.",
    "monitor": "How often and how patiently the engines are scraped.",
    "control": "The control socket (console, `syshax status`/`set`) and where runtime changes are kept.",
    "logging": "Logging.",
    "service": "Service classes: each request's targets, priority and whether it may be shed, and the rules that "
               "pick a class (see docs/service-levels.md). Every key here can change while the daemon runs.",
}


def _default_text(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, list):
        return "`[]`" if not value else f"`{value!r}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    # A '|' inside a cell would end it; Markdown wants it escaped.
    return text.replace("|", "\\|")


def section_of(key: str) -> str:
    """The heading a key is listed under (the longest known section prefix)."""
    best = ""
    for section in SECTIONS:
        if key.startswith(section + ".") and len(section) > len(best):
            best = section
    return best or key.split(".", 1)[0]


def render_tables(keys: Iterable[KeyInfo]) -> str:
    """The generated part of the page: one table per section, keys in model order."""
    grouped: dict[str, list[KeyInfo]] = {}
    for info in keys:
        grouped.setdefault(section_of(info.key), []).append(info)
    unknown = [s for s in grouped if s not in SECTIONS]
    if unknown:
        raise SystemExit(
            f"gen_config_doc: no heading for config section(s) {', '.join(unknown)}; "
            "add them to SECTIONS in tools/gen_config_doc.py"
        )
    out: list[str] = []
    for section, blurb in SECTIONS.items():
        rows = grouped.get(section)
        if not rows:
            continue
        out += [f"### `{section}`", "", blurb, ""]
        out += ["| key | accepts | default | live | meaning |", "|---|---|---|---|---|"]
        for info in rows:
            live = "yes" if info.key in RUNTIME_KEYS else ""
            out.append(
                f"| `{info.key}` | {_cell(info.allowed)} | {_cell(_default_text(info.default))} "
                f"| {live} | {_cell(info.description)} |"
            )
        out.append("")
    count = sum(len(v) for v in grouped.values())
    out.append(f"{count} keys, {len(RUNTIME_KEYS)} of them changeable while the daemon runs (\"live\").")
    return "\n".join(out)


def updated_page(page: str, tables: str) -> str:
    """``page`` with the text between the markers replaced by ``tables``."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"gen_config_doc: {DOC} lacks the markers {BEGIN!r} ... {END!r}")
    return page[: start + len(BEGIN)] + "\n" + tables + "\n" + page[end:]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check``, verify) the generated tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page to update")
    args = parser.parse_args(argv)
    page = args.doc.read_text(encoding="utf-8")
    fresh = updated_page(page, render_tables(iter_keys()))
    if fresh == page:
        print(f"{args.doc}: up to date")
        return 0
    if args.check:
        print(f"{args.doc} is out of date; run: python tools/gen_config_doc.py", file=sys.stderr)
        return 1
    args.doc.write_text(fresh, encoding="utf-8")
    print(f"{args.doc}: tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
