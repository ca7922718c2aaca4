"""The code stays readable as it grows: small modules with one job, short functions.

Limits from the architecture issue: no module in specguard_graph/ over 250 lines and no
function over 60 lines, except where the exception says why."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specguard_graph"
LONG_MODULES: dict[str, str] = {}  # path -> why it may be longer


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_250_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > 250
    }
    assert set(long) <= set(LONG_MODULES), long


def test_no_function_over_60_lines():
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > 60:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert not long, long
