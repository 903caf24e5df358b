"""Shared small fixtures: a seeded RNG and a factory for tiny ViTs (fast on 2 CPU cores)."""

import os

import pytest
import torch

import vitpos
from vitpos.pos.base import PosScheme

# Training grid 8x8 (32 px, patch 4); head_dim 8, so rope2d has 2 frequencies per axis.
TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def pytest_configure(config):
    """Under xdist, each worker gets its share of the cores, so that the workers do not spin-wait on each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread (two threads spin-wait on a busy 2-core CPU); restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny():
    """tiny(pos, **overrides) -> a small vitpos ViT built with create_model."""

    def make(pos: str, **kw) -> vitpos.ViT:
        return vitpos.create_model(pos, **{**TINY, **kw})

    return make


@pytest.fixture
def builds(monkeypatch):
    """builds() -> how many times a scheme computed its position inputs instead of serving them from its cache."""
    count = 0
    cached = PosScheme.cached

    def counting(self, key, build, *params):
        def counted():
            nonlocal count
            count += 1
            return build()

        return cached(self, key, counted, *params)

    monkeypatch.setattr(PosScheme, "cached", counting)
    return lambda: count


def pytest_collection_modifyitems(items):
    """The library contracts (tests/test_compat.py) run first: an upgrade that removed a private name vitpos uses
    fails there, by name, before it fails deep inside a run."""
    items.sort(key=lambda item: item.path.name != "test_compat.py")
