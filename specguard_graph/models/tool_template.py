"""The Qwen2.5 tool template's doubled braces, fixed the way Qwen fixed them upstream.

The September 2024 Qwen2.5 templates (the embedded Qwen2.5-Coder pair's among them) write the
call format inside a Jinja string literal as `{{"name": <function-name>, "arguments":
<args-json-object>}}`; a string literal is not an expression, so the model is shown the
braces doubled, and small models copy them. Later Qwen2.5-Instruct templates, BFCL's Qwen FC
handler, Ollama's and llama.cpp's Qwen templates all show single braces. Only that exact
literal is replaced: a template a user wrote, or one already fixed, comes back unchanged.
"""

from __future__ import annotations

from typing import Any

DOUBLED = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'
SINGLE = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'


def fixed(template: str) -> str:
    """`template` with the doubled-brace call format written with single braces."""
    return template.replace(DOUBLED, SINGLE)


def fix_tokenizer(tokenizer: Any) -> Any:
    """Fix `tokenizer.chat_template` in place where it is a string that has the bug."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and DOUBLED in template:
        tokenizer.chat_template = fixed(template)
    return tokenizer
