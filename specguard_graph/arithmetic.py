"""Is every equation a step states true? A safe parser (no `eval`) over plain arithmetic, after
LaTeX and typography are normalised (`\\times`, `\\frac{a}{b}`, `$`, `%`, `1,000`).

It lives beside the graph, not in the evidence package, because it is both a step label
(`evidence.labels`) and a live refusal (`reject_false_arithmetic`): one checker, so the rule
benched is the rule measured.
"""

from __future__ import annotations

import ast
import itertools
import operator
import re

_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow,
}  # fmt: skip
_LATEX = [
    (r"\\left|\\right|\\,|\\!|\\;|\\ ", ""),
    (r"\\times|\\cdot|×|·|∗", "*"),
    (r"\\div|÷", "/"),
    (r"\\\(|\\\)|\\\[|\\\]|\$", " "),
    (r"−|–", "-"),
]
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*(?:\\%|%)")
_SIDE = r"[\d.\s+\-*/()^]*"  # what an arithmetic side of an equation may hold
_COMPUTES = re.compile(r"\d[\s)]*[+\-*/]|[+\-*/][\s(]*\d")  # an operation between numbers
_HUNDREDTHS = re.compile(r"\((\d+(?:\.\d+)?)/100\)")  # "35%" after `normalise`
_BULLET = re.compile(r"^\s*[-*]\s+")  # a markdown list item's "- ", not a minus sign


def normalise(text: str) -> str:
    """LaTeX and typography to plain arithmetic: \\times, \\frac{a}{b}, $, %, 1,000."""
    for pattern, repl in _LATEX:
        text = re.sub(pattern, repl, text)
    while _FRAC.search(text):
        text = _FRAC.sub(r"((\1)/(\2))", text)
    text = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), text)
    return _PERCENT.sub(r"(\1/100)", text).replace("^", "**")


def evaluate(expr: str) -> float | None:
    """The value of a pure arithmetic expression, or None (no names, calls or huge powers)."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = walk(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
                raise ValueError("power too large")
            return _OPS[type(node.op)](left, right)
        raise ValueError(f"not arithmetic: {type(node).__name__}")

    try:
        return walk(tree.body)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def _decimals(side: str) -> int:
    m = re.fullmatch(r"\s*-?\d+(?:\.(\d+))?\s*", side)
    return len(m.group(1) or "") if m else 9


def _holds(a: float, b: float, right: str) -> bool:
    """a equals the right side b, as written: to its decimals, and "7 / 20 * 100 = 35%" holds
    too (a percentage stated as its number of hundredths)."""
    tol = max(1e-9 * max(abs(a), 1.0), 0.5 * 10 ** -_decimals(right) + 1e-12)
    if abs(a - b) <= tol:
        return True
    percent = _HUNDREDTHS.fullmatch(right.strip())
    if not percent:
        return False
    return abs(a - 100 * b) <= max(1e-9 * abs(a), 0.5 * 10 ** -_decimals(percent.group(1)) + 1e-12)


def _left_side(left_raw: str) -> str | None:
    """The arithmetic that ends an equation's left side, or None when that is no computation
    on numbers alone: "x = 5" and "48 = 48" (no operation), "60% = 30" (a percentage is no
    operation), "x + 2 = 12" and "V - 3 = 7" (the run starts inside a term with a name)."""
    left = re.search(rf"{_SIDE}$", left_raw).group(0)  # type: ignore[union-attr]
    before, run = left_raw[: len(left_raw) - len(left)].rstrip(), left.strip()
    if not run or run[0] in "+*/" or (run[0] == "-" and before[-1:].isalnum()):
        return None
    if not re.search(r"\d", run) or not _COMPUTES.search(_HUNDREDTHS.sub(r"\1", run)):
        return None
    return left


def equations(text: str) -> list[tuple[str, str, bool]]:
    """(left, right, true?) for every `a op b = c` the text states with numbers on both sides;
    a right side written with d decimals may be rounded to d decimals."""
    found = []
    for line in normalise(text).splitlines():
        sides = re.split(r"=+", _BULLET.sub("", line))
        for left_raw, right_raw in itertools.pairwise(sides):
            left = _left_side(left_raw)
            if left is None:
                continue
            right = re.match(_SIDE, right_raw).group(0)  # type: ignore[union-attr]
            right = re.split(r"\.\s|\.$", right)[0]  # a sentence's full stop
            a, b = evaluate(left), evaluate(right)
            if a is None or b is None:
                continue
            found.append((left.strip(), right.strip(), _holds(a, b, right)))
    return found


def arithmetic(text: str) -> bool | None:
    """True when every stated equation holds, False when one does not, None without any."""
    eqs = equations(text)
    return None if not eqs else all(ok for _, _, ok in eqs)


def false_equation(text: str, *, cut: bool = False) -> str | None:
    """The first equation the text states that does not hold, as "left = right", or None. A step
    cut at its token limit may end inside a number ("6 * 12 = 7" of "72"), so its last line is
    not checked."""
    if cut:
        text = text.rsplit("\n", 1)[0] if "\n" in text else ""
    return next((f"{a} = {b}" for a, b, ok in equations(text) if not ok), None)
