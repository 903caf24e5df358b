"""`relbias` with T5's relative buckets (``buckets``): a table that serves any grid by construction.

* the bucket of an offset is T5's (pinned against a copy of the formula written here), per axis;
* the bias depends on the offset alone, saturates beyond ``bucket_distance``, and its table is sized by the
  buckets, never by the grid: any grid (16x the training one) is served, every method alike, finite;
* a model rebuilt at another grid with the carried state computes the same.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import TRAIN

import vitpos
from vitpos.pos.relbias import t5_bucket

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def t5_by_hand(d: int, buckets: int, max_distance: int) -> int:
    """T5's bidirectional relative_position_bucket for one offset, in plain Python (positive offsets on top)."""
    half = buckets // 2
    exact = half // 2
    out = half if d > 0 else 0
    a = abs(d)
    if a < exact:
        return out + a
    return out + min(half - 1, exact + int(math.log(a / exact) / math.log(max_distance / exact) * (half - exact)))


@pytest.mark.parametrize(("buckets", "far"), [(32, 128), (8, 8), (12, 20), (4, 3)])
def test_buckets_are_t5s(buckets, far):
    d = torch.arange(-3 * far, 3 * far + 1)
    got = t5_bucket(d, buckets, far)
    assert got.tolist() == [t5_by_hand(int(v), buckets, far) for v in d]
    # every bucket in use but the upper half's first (offset 0 sits in the lower half), as in T5
    assert got.min() == 0 and got.max() == buckets - 1 and len(got.unique()) == buckets - 1
    pos, neg = got[d > 0], got[d < 0].flip(0)  # by growing |d|
    assert (pos.diff() >= 0).all() and (neg.diff() >= 0).all()  # never nearer for a longer offset
    exact = buckets // 4
    assert len(got[(d.abs() < exact) & (d > 0)].unique()) == exact - 1  # one bucket per near offset
    assert (got[d >= far] == buckets - 1).all() and (got[d <= -far] == buckets // 2 - 1).all()  # saturated


def relbias(grid_px=32, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    return vitpos.create_model("relbias", **{**TINY, "img_size": grid_px, "pos_kwargs": {"buckets": 8, **kw}}).eval()


def test_bucketed_bias_depends_on_the_offset_alone_and_serves_any_grid():
    m = relbias(bucket_distance=8)
    assert m.pos.table.shape == (2, 64, 4)
    assert relbias(grid_px=96).pos.table.shape == m.pos.table.shape  # sized by the buckets, not the grid
    assert relbias().pos.bucket_distance == 32  # T5's ratio, 4 x buckets, whatever the grid
    big = (3 * TRAIN[0], 5 * TRAIN[1] // 2)
    with torch.no_grad():
        bias = {method: (setattr(m.pos, "method", method), m.pos.attn_pos(big)[0].bias)[1] for method in m.pos.methods}
        small = m.pos.attn_pos(TRAIN)[0].bias
    first = bias["resize"]
    assert torch.isfinite(first).all() and first.shape == (4, big[0] * big[1], big[0] * big[1])
    assert all(torch.equal(b, first) for b in bias.values())  # nothing to resize: every method is the same
    w = big[1]

    def at(y, x, dy, dx):
        return first[:, y * w + x, (y - dy) * w + (x - dx)]  # query (y, x), offset (dy, dx) = query - key

    for dy, dx in [(0, 0), (1, -2), (-3, 3), (4, 0)]:
        torch.testing.assert_close(at(10, 10, dy, dx), at(16, 5, dy, dx), rtol=0, atol=0)
        torch.testing.assert_close(at(10, 10, dy, dx), small[:, 4 * 8 + 4, (4 - dy) * 8 + 4 - dx], rtol=0, atol=0)
    # beyond bucket_distance (8 here) every offset shares the last bucket
    torch.testing.assert_close(at(23, 10, 9, 0), at(23, 10, 21, 0), rtol=0, atol=0)
    assert not torch.equal(at(23, 10, 1, 0), at(23, 10, 2, 0))  # near offsets are told apart


def test_each_pair_reads_the_entry_of_its_row_and_column_buckets():
    m = relbias(bucket_distance=6)
    grid = (5, 7)
    index = m.pos.index(grid, TRAIN)
    for q in range(35):
        for k in range(0, 35, 3):
            dy, dx = q // 7 - k // 7, q % 7 - k % 7  # query minus key
            assert index[q, k] == t5_by_hand(dy, 8, 6) * 8 + t5_by_hand(dx, 8, 6)


def test_bucketed_locality_starts_local_and_carries_to_any_grid():
    m = relbias(init_std=0.0)
    with torch.no_grad():
        row = m.pos.attn_pos(TRAIN)[0].bias[0, 4 * 8 + 4].reshape(8, 8)  # head 0, the centre query
    assert row[4, 4] == 0 and row[4, 5] < 0 and row[4, 7] < row[4, 5] and row[0, 0] < row[3, 3]
    m = relbias()
    dst = relbias(grid_px=48)
    dst.load_state_dict({**dst.state_dict(), **{f"pos.{k}": v for k, v in m.pos.state_at_grid((12, 12)).items()},
                         **{k: v for k, v in m.state_dict().items() if not k.startswith("pos.")}})  # fmt: skip
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        assert torch.equal(dst(x), m(x))


@pytest.mark.parametrize(("kw", "needle"), [({"buckets": 7}, "even integer"), ({"buckets": 2}, "even integer"),
                                            ({"buckets": 16, "bucket_distance": 4}, "exceed buckets/4")])  # fmt: skip
def test_bad_bucket_options(kw, needle):
    with pytest.raises(ValueError, match=needle):
        relbias(**kw)
