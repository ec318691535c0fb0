"""One idea per module, functions that fit on a screen: no module over 400 lines, no function over 80.

A module that passes 400 lines probably holds two ideas; a function over 80 lines, several
steps that want names. The limits hold for everything in the tree, tests and benchmarks too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("syshaxd", "sim", "demo", "console", "bench", "tools", "tests")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def oversized(root: Path = ROOT) -> list[str]:
    """Every module and function over its limit, as ``path:line name (N lines)``."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(root)
            lines = len(text.splitlines())
            if lines > MAX_MODULE_LINES:
                found.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{where}:{node.lineno} {node.name}: {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def test_no_module_over_400_lines_and_no_function_over_80() -> None:
    found = oversized()
    assert not found, "too big:\n  " + "\n  ".join(found)


def test_the_check_sees_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "syshaxd").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (tmp_path / "syshaxd" / "long.py").write_text(f"def long():\n{body}\n" + "\n" * 320, encoding="utf-8")
    found = oversized(tmp_path)
    assert any("long: 86 lines" in line for line in found), found
    assert any("long.py: 406 lines" in line for line in found), found
