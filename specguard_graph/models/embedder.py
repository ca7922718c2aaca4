"""Sentence embeddings for the self-consistency selector."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer

from ..errors import ModelLoadError


class SentenceEmbedder:
    """Thin wrapper so the selector depends on `embed`, not on sentence-transformers' API."""

    def __init__(self, model: SentenceTransformer):
        self.model = model
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> SentenceEmbedder:
        path = Path(path).expanduser()
        if not path.is_dir():
            raise ModelLoadError(f"embedder directory does not exist: {path}")
        try:
            return cls(SentenceTransformer(str(path), device=device, local_files_only=True))
        except Exception as exc:  # any parse failure of a user directory is a load error
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ModelLoadError(f"cannot load embedder from {path}: {detail}") from None

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit-norm embeddings, one row per text (empty texts embed like any other)."""
        # one forward on the batch: encode()'s length sorting, batching and progress plumbing
        # cost more than the tiny forward itself on k short steps
        with self._lock, torch.inference_mode():
            features = self.model.preprocess(list(texts))
            features = {
                k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v
                for k, v in features.items()
            }
            out = self.model(features)["sentence_embedding"]
        return torch.nn.functional.normalize(out.float(), dim=-1).cpu()
