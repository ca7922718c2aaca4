"""Serve a GGUF model with llama.cpp's own server (the `xllamacpp` wheel) on this machine.

What a CPU user would run instead of in-process transformers, and the anchor the benchmarks
compare against: the same Q4_K_M weights, compiled decode, continuous batching over
`parallel` slots, and, with `draft=`, llama.cpp's own draft-model speculative decoding.
`LlamaServer` starts one in a child process (so its threads and memory go when it stops) and
waits until `/health` answers; `specguard models serve` runs one in the foreground.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ...errors import ModelLoadError
from .child_server import ChildServer, free_port


def serve_forever(gguf: Path, *, port: int, host: str = "127.0.0.1", draft: Path | None = None,
                  threads: int = 2, parallel: int = 4, ctx: int = 4096,
                  draft_max: int = 8) -> None:  # fmt: skip
    """Run the server in this process until it is killed."""
    try:
        import xllamacpp
    except ImportError:
        raise ModelLoadError("llama.cpp's server needs `pip install xllamacpp`") from None
    for path in (gguf, draft):
        if path is not None and not Path(path).is_file():
            raise ModelLoadError(f"{path}: no such GGUF file")
    p = xllamacpp.CommonParams()
    p.model.path, p.port = str(gguf), port
    if host != "127.0.0.1":
        p.hostnames = [host]
    p.n_ctx, p.n_parallel = ctx * parallel, parallel  # llama.cpp splits n_ctx over the slots
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    if draft is not None:  # llama.cpp's token-level speculative decoding, draft in the server
        kinds = xllamacpp.common_speculative_type
        p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        p.speculative.draft.mparams.path = str(draft)
        p.speculative.draft.n_max = draft_max
        p.speculative.draft.cpuparams.n_threads = threads
        p.speculative.draft.cpuparams_batch.n_threads = threads
    server = xllamacpp.Server(p)  # noqa: F841 - serves while it is referenced
    print("ready", flush=True)
    while True:
        time.sleep(3600)


class LlamaServer(ChildServer):
    """`with LlamaServer(gguf) as url:` a served model at `url` (…/v1) until the block ends."""

    engine = "llama.cpp"

    def __init__(self, gguf: Path, *, draft: Path | None = None, threads: int = 2,
                 parallel: int = 4, ctx: int = 4096, port: int | None = None,
                 start_timeout: float = 180.0):  # fmt: skip
        port = port or free_port()
        args = [str(gguf), "--port", str(port), "--threads", str(threads),
                "--parallel", str(parallel), "--ctx", str(ctx)]  # fmt: skip
        if draft is not None:
            args += ["--draft", str(draft)]
        self.args = args
        super().__init__([sys.executable, "-m", __name__, *args], port=port,
                         start_timeout=start_timeout)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--draft", type=Path, help="a draft GGUF: llama.cpp's own speculative decoding")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="slots (concurrent requests/samples)")
    ap.add_argument("--ctx", type=int, default=4096, help="context per slot")
    a = ap.parse_args(argv)
    serve_forever(a.gguf, port=a.port, host=a.host, draft=a.draft, threads=a.threads,
                  parallel=a.parallel, ctx=a.ctx)  # fmt: skip


if __name__ == "__main__":
    main()
