"""`llamacpp-target`: llama.cpp's plain target on the same GGUF the project's target is read
from, as a bench method, so `specguard bench` times it interleaved with the project's methods.

What a CPU user runs instead of this project: llama.cpp's server (`xllamacpp`), greedy, on the
target's Q4_K_M file, started once per bench process on 127.0.0.1 with the same thread count
as torch. Each request computes its prompt afresh (`cache_prompt: false`), as the local methods
start every problem with an empty prefix store. Its text is llama.cpp's, not the project
target's (other kernels, another rounding): compare it per generated token, not per answer.
"""

from __future__ import annotations

import atexit
from typing import Any

import torch

_SERVERS: dict[str, Any] = {}


def served(role: str = "target") -> Any:
    """The served model of `role` (started on first use, stopped when the process exits)."""
    if role not in _SERVERS:
        from ..models.install.installer import gguf_path
        from ..models.install.registry import DEFAULTS
        from ..models.served.client import ServedStepModel, repeatable
        from ..models.served.llamacpp import LlamaServer

        gguf = gguf_path(DEFAULTS[role])
        server = LlamaServer(gguf, threads=torch.get_num_threads(), parallel=1)
        url = server.__enter__()
        atexit.register(server.__exit__, None, None, None)
        _SERVERS[role] = repeatable(ServedStepModel(url))
    return _SERVERS[role]
