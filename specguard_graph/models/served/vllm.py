"""Serve a model directory with vLLM's CPU build (`make vllm` builds its environment).

vLLM is what a user who outgrows one machine serves with, and on a completions route it gives
what llama.cpp's server does not: prompt log-probs (`echo` with `logprobs`), so a served target
can score a given step or verify a rejected one in one request. On this CPU it serves in
bfloat16 with eager kernels; the embedded models' converted directories are read as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import ModelLoadError
from .child_server import ChildServer, free_port
from .vllm_env import is_built

VENV_ENV = "SPECGUARD_VLLM_VENV"


def vllm_venv() -> Path:
    """Where `make vllm` put the environment: $SPECGUARD_VLLM_VENV, else ./.venv-vllm."""
    return Path(os.environ.get(VENV_ENV) or ".venv-vllm").absolute()


def vllm_command(model_dir: Path, *, port: int, host: str = "127.0.0.1", name: str | None = None,
                 max_model_len: int = 2048, venv: Path | None = None) -> list[str]:  # fmt: skip
    venv = venv or vllm_venv()
    if not is_built(venv):
        raise ModelLoadError(f"no vLLM environment at {venv}: run `make vllm` (or set {VENV_ENV})")
    if not (Path(model_dir) / "config.json").is_file():
        raise ModelLoadError(f"{model_dir}: not a model directory (no config.json)")
    return [str(venv / "bin" / "vllm"), "serve", str(model_dir), "--host", host,
            "--port", str(port), "--dtype", "bfloat16", "--max-model-len", str(max_model_len),
            "--enforce-eager", "--served-model-name", name or Path(model_dir).name]  # fmt: skip


def vllm_env(kv_cache_gb: int = 2) -> dict[str, str]:
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    if (os.cpu_count() or 1) <= 2 and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in os.environ:
        # vLLM keeps a core for its scheduler: on 2 cores that halves the model's threads
        # (0.5B greedy: 5.4 -> 9.2 tokens/s with none reserved, measured here)
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


class VllmServer(ChildServer):
    """`with VllmServer(model_dir) as url:` vLLM serving `model_dir` at `url` (…/v1); the model's
    name on the server is the directory's name unless `name` is given."""

    engine = "vLLM"

    def __init__(self, model_dir: Path, *, port: int | None = None, name: str | None = None,
                 max_model_len: int = 2048, kv_cache_gb: int = 2, venv: Path | None = None,
                 start_timeout: float = 300.0):  # fmt: skip
        port = port or free_port()
        cmd = vllm_command(model_dir, port=port, name=name, max_model_len=max_model_len,
                           venv=venv)  # fmt: skip
        super().__init__(cmd, port=port, start_timeout=start_timeout, env=vllm_env(kv_cache_gb))


def serve_forever(cmd: list[str], kv_cache_gb: int = 2) -> None:
    """Run `vllm_command`'s server in the foreground (it replaces this process)."""
    os.execve(cmd[0], cmd, {**os.environ, **vllm_env(kv_cache_gb)})
