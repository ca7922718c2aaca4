import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from specguard_graph.testing import TinyModels, tiny_models


@pytest.fixture(scope="session")
def tiny() -> TinyModels:
    return tiny_models()
