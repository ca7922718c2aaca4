"""What a "step" is: a protocol, so reasoning paragraphs, plan items and tool calls can all be
verified by the same graph without the graph knowing which one it runs (tool calls, one
assistant message per step: `agents.spec.ChatSteps`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

REASONING_SYSTEM_PROMPT = (
    "Please reason step by step, separating steps with a blank line, "
    "and put your final answer within \\boxed{}."
)


@runtime_checkable
class StepSpec(Protocol):
    """How steps end, when the answer is final, how the prompt looks, what the answer is."""

    name: str
    delimiter: str

    def render_prompt(self, question: str, tokenizer: Any) -> str:
        """The text both models continue (usually the chat template plus an assistant turn)."""
        ...

    def is_final(self, step: str, *, eos: bool) -> bool:
        """True when this step ends the answer (`eos` says the model stopped on its own)."""
        ...

    def extract_answer(self, text: str) -> str | None:
        """The answer inside the full response text, or None when there is none."""
        ...


def separator(delimiter: str, ended: str) -> str:
    """What follows a step in the context: the delimiter, unless the step was cut or final
    (docs/design.md, "Steps in the context")."""
    return delimiter if ended == "delimiter" else ""


def history(delimiter: str, steps: Sequence[Mapping[str, Any]]) -> str:
    """The response so far as both models see it: each step's text and its separator."""
    return "".join(s["text"] + separator(delimiter, s.get("ended", "")) for s in steps)


def _chat_prompt(tokenizer: Any, system: str, user: str) -> str:
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return str(
            tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )
    return f"{system}\n\nQuestion: {user}\n\nAnswer:\n"


def last_boxed(text: str) -> str | None:
    """Content of the last brace-balanced \\boxed{...} (nested braces kept), else None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len("\\boxed{") : i - 1].strip()
        start = text.rfind("\\boxed{", 0, start)
    return None


@dataclass(frozen=True)
class ReasoningSteps:
    """Blank-line separated reasoning; the answer is the last \\boxed{}."""

    system_prompt: str = REASONING_SYSTEM_PROMPT
    name: str = "reasoning"
    delimiter: str = "\n\n"

    def render_prompt(self, question: str, tokenizer: Any) -> str:
        return _chat_prompt(tokenizer, self.system_prompt, question)

    def is_final(self, step: str, *, eos: bool) -> bool:
        return eos or last_boxed(step) is not None

    def extract_answer(self, text: str) -> str | None:
        return last_boxed(text)


PLAN_SYSTEM_PROMPT = "You are a helpful planner."
PLAN_REQUEST = (
    "Write a short numbered plan (3 to 6 items, one per line) to {goal}. "
    "Use the format '1. ...'. After the last item write DONE on its own line."
)
_PLAN_ITEM = re.compile(r"^\s*(\d+)[.)]\s+(.*\S)\s*$")
_MARKUP = re.compile(r"[*_`]+")


@dataclass(frozen=True)
class PlanSteps:
    """Numbered plan items, one per line; the plan is final at a line reading DONE."""

    system_prompt: str = PLAN_SYSTEM_PROMPT
    request: str = PLAN_REQUEST
    name: str = "plan"
    delimiter: str = "\n"

    def render_prompt(self, question: str, tokenizer: Any) -> str:
        return _chat_prompt(tokenizer, self.system_prompt, self.request.format(goal=question))

    def is_final(self, step: str, *, eos: bool) -> bool:
        return eos or step.strip().upper().rstrip(".") == "DONE"

    def extract_answer(self, text: str) -> str | None:
        items = [
            _MARKUP.sub("", m.group(2)).strip()
            for line in text.splitlines()
            if (m := _PLAN_ITEM.match(line))
        ]
        return json.dumps(items) if items else None


NEVER = "\x00\x01never"  # a delimiter no text holds: the model runs to EOS or the budget
_OUTPUT_BLOCK = re.compile(r"```\s*output\b|^\s*output:\s*$", re.IGNORECASE | re.MULTILINE)


def writes_output(text: str) -> bool:
    """The text writes a program's output itself (an ```output block, or an "Output:" line):
    a result nothing executed."""
    return bool(_OUTPUT_BLOCK.search(text))


PROGRAM_SYSTEM_PROMPT = (
    "Please reason step by step, separating steps with a blank line. You may write Python in a "
    "```python block that prints what you need: it is run for you, and its real output follows "
    "in an ```output block. Put your final answer within \\boxed{}."
)
# Asked in the user turn too: offered in the system prompt alone, code was never written (design.md)
PROGRAM_REQUEST = (
    "{question}\n\nSolve it with a Python program: write a ```python block that prints the "
    "answer (it is run for you, and its output follows), then give the final answer within "
    "\\boxed{{}}."
)
_PYTHON_BLOCK = re.compile(r"```python[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ProgramSteps(ReasoningSteps):
    """Program-aided reasoning: a step that closes a ```python block ends at its fence (`trim`)
    and has the block run for real (`program/`); the real output, never the model's, follows."""

    system_prompt: str = PROGRAM_SYSTEM_PROMPT
    request: str = PROGRAM_REQUEST
    name: str = "program"

    def render_prompt(self, question: str, tokenizer: Any) -> str:
        return _chat_prompt(tokenizer, self.system_prompt, self.request.format(question=question))

    @staticmethod
    def _closed_in(done: str, step: str) -> list[re.Match[str]]:
        """The Python blocks whose closing fence is in this step (they may open earlier)."""
        return [m for m in _PYTHON_BLOCK.finditer(done + step) if m.end() > len(done)]

    def program(self, done: str, step: str) -> str | None:
        """The Python block this step closes, given the response so far (None: it closes none)."""
        closed = self._closed_in(done, step)
        return closed[-1].group(1) if closed else None

    def is_final(self, step: str, *, eos: bool) -> bool:
        """Never a step that ends at a program's fence (`trim` cuts every program there): its
        real output comes next, whatever answer the code itself spells out."""
        if step.rstrip().endswith("```") and not writes_output(step):
            return False
        return super().is_final(step, eos=eos)

    def trim(self, done: str, step: str) -> str:
        """The step up to the fence that closes its program: what a model writes after it (its
        own "output", the answer that output leads to) would be a result nothing executed, so
        it is dropped and written again after the real output."""
        closed = self._closed_in(done, step)
        return step[: closed[0].end() - len(done)] if closed else step

    @staticmethod
    def fabricated(step: str) -> bool:
        """The step writes a program's output itself."""
        return writes_output(step)


STEP_SPECS: dict[str, StepSpec] = {
    "reasoning": ReasoningSteps(),
    "program": ProgramSteps(),
    "plan": PlanSteps(),
}


def get_step_spec(name: str) -> StepSpec:
    """Look a built-in spec up by name, with an error that lists the known names."""
    from .errors import ConfigError

    try:
        return STEP_SPECS[name]
    except KeyError:
        raise ConfigError(
            f"unknown step spec {name!r}; known: {', '.join(sorted(STEP_SPECS))}"
        ) from None
