"""Step labels computed from the text alone, so they do not depend on which model or numerics
produced a record: is every equation the step states true, and did the step write a program's
output that nothing executed. The arithmetic checker is `specguard_graph.arithmetic`, shared with
the live refusal `reject_false_arithmetic`."""

from __future__ import annotations

import re

from ..arithmetic import arithmetic as arithmetic
from ..steps import writes_output


def fabricated_output(text: str) -> bool:
    """The step writes an output block itself: a program's result that nothing executed."""
    return writes_output(text)


def contains_code(text: str) -> bool:
    return "```" in text or bool(re.search(r"^\s*(def |print\(|import )", text, re.MULTILINE))
