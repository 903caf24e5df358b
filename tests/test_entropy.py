"""Attention entropy per block and head (vitpos.diagnose.attention_entropy), at any image size.

* attention spread evenly over the N keys gives log N, at the training size and at others, class token included;
* attention held on one key (a one-hot bias) gives ~0;
* the per-loader statistic of ``diagnostics.json`` averages the per-batch one.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import vitpos
from vitpos import diagnose as dg

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)
ZERO = 1e-3  # entropy (nats) of attention whose other keys sit 1e4 logits below the one it holds


def blind(pos: str, **kw) -> vitpos.ViT:
    """A model whose q and k are zero: every logit is the scheme's bias alone."""
    torch.manual_seed(0)
    m = vitpos.create_model(pos, **{**TINY, **kw}).eval()
    with torch.no_grad():
        for block in m.blocks:
            block.attn.qkv.weight[: 2 * 32].zero_()
            block.attn.qkv.bias[: 2 * 32].zero_()
    return m


@pytest.mark.parametrize("class_token", [False, True])
@pytest.mark.parametrize("size", [(32, 32), (48, 40)])
def test_uniform_attention_has_entropy_log_n(size, class_token):
    m = blind("rope2d", class_token=class_token)
    h = dg.attention_entropy(m, torch.randn(3, 3, *size))
    n = size[0] // 4 * size[1] // 4 + class_token
    assert h.shape == (2, 4)
    torch.testing.assert_close(h, torch.full((2, 4), math.log(n)), rtol=1e-5, atol=1e-5)


def test_attention_on_one_key_has_entropy_near_zero():
    m = blind("relbias")
    with torch.no_grad():  # the bias: 0 on a token itself, -1e4 on every other: attention is one-hot
        centre = (8 - 1) * 15 + (8 - 1)  # offset (0, 0) in the (2H-1)(2W-1) table
        m.pos.table.fill_(-1e4)
        m.pos.table[:, centre] = 0.0
    h = dg.attention_entropy(m, torch.randn(2, 3, 32, 32))
    assert (h >= 0).all() and h.max() < ZERO
    # ALiBi's distance penalty, steepest in head 0: between the two, and more focused the steeper the head
    focused = dg.attention_entropy(blind("alibi2d"), torch.randn(2, 3, 32, 32))
    assert (focused > 1).all() and (focused[:, 0] < math.log(64) - 0.1).all() and (focused.diff(dim=1) > 0).all()


def test_the_loader_statistic_averages_the_batches():
    torch.manual_seed(0)
    m = vitpos.create_model("fire", **TINY).eval()
    images = torch.randn(6, 3, 32, 32)
    loader = DataLoader(TensorDataset(images, torch.zeros(6, dtype=torch.long)), batch_size=4)
    _, entropy = dg.attention_statistics(m, loader)
    expected = (dg.attention_entropy(m, images[:4]) * 4 + dg.attention_entropy(m, images[4:]) * 2) / 6
    torch.testing.assert_close(entropy, expected, rtol=1e-5, atol=1e-5)
