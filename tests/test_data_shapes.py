"""The embedded `shapes` data set: determinism, native multi-resolution rendering, labels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitpos.config import ConfigError, DataConfig
from vitpos.data import build_datamodule
from vitpos.data.shapes import (
    BAG_OF_PATCHES_CEILING,
    CELLS,
    MARGIN,
    MIN_GAP,
    NUM_CLASSES,
    SIZE_RANGE,
    ShapesDataset,
    coverage,
    render_shapes,
    sample_scenes,
)

CELL = dict(atol=1e-4, rtol=0)  # fp32 positions times 8 cells: whole numbers (or equal phases) up to rounding
EDGE = 1e-6  # fp32 rounding of an object's extent against the border margin
PIXEL = 1e-5  # a pixel wholly inside an object (or the background) has exactly its colour, up to fp32 rounding


def test_deterministic_by_seed():
    a, ya = render_shapes(64, 32, 32, seed=3)
    b, yb = render_shapes(64, 32, 32, seed=3)
    c, _ = render_shapes(64, 32, 32, seed=4)
    assert a.shape == (64, 3, 32, 32) and a.dtype == torch.float32
    assert a.min() >= 0 and a.max() <= 1
    assert torch.equal(a, b) and torch.equal(ya, yb)
    assert (a - c).abs().mean() > 0.1


def test_scene_depends_on_index_not_on_n():
    full, y = render_shapes(20, 24, 24, seed=1)
    part, yp = render_shapes(5, 24, 24, seed=1, start=10)
    assert torch.equal(full[10:15], part) and torch.equal(y[10:15], yp)


def test_same_scene_at_two_resolutions():
    hi, y_hi = render_shapes(32, 64, 64, seed=7, noise=0)
    lo, y_lo = render_shapes(32, 32, 32, seed=7, noise=0)
    down = F.avg_pool2d(hi, 2)
    assert torch.equal(y_hi, y_lo)
    assert (down - lo).abs().mean() < 0.005  # only the rasterisation differs
    assert (down - lo.roll(1, 0)).abs().mean() > 0.1  # another scene is far
    # with pixel noise the scenes still agree, up to the noise
    hi, _ = render_shapes(32, 64, 64, seed=7)
    lo, _ = render_shapes(32, 32, 32, seed=7)
    assert (F.avg_pool2d(hi, 2) - lo).abs().mean() < 0.08


def test_non_square_is_the_same_scene_stretched():
    wide, y = render_shapes(16, 32, 96, seed=2, noise=0)
    square, y2 = render_shapes(16, 96, 96, seed=2, noise=0)
    assert wide.shape == (16, 3, 32, 96) and torch.equal(y, y2)
    squeezed = F.avg_pool2d(square, (3, 1))  # 96x96 -> 32x96
    assert (squeezed - wide).abs().mean() < 0.01


def test_labels_balanced():
    _, y = render_shapes(8 * 50, 8, 8, seed=0)
    assert torch.equal(torch.bincount(y, minlength=NUM_CLASSES), torch.full((NUM_CLASSES,), 50))


def test_labels_match_the_rendered_masks():
    n = 200
    scenes = sample_scenes(range(n), seed=11)
    cov_c, cov_r = coverage(scenes, 64, 64)
    grid = (torch.arange(64) + 0.5) / 64

    def centroid(cov):
        m = cov.sum((1, 2))
        return torch.stack([(cov.sum(1) * grid).sum(1) / m, (cov.sum(2) * grid).sum(1) / m], -1)

    d = centroid(cov_c) - centroid(cov_r)  # circle minus reference, (x, y)
    horizontal = d[:, 0].abs() > d[:, 1].abs()
    rel = torch.where(horizontal, (d[:, 0] > 0).long(), 2 + (d[:, 1] > 0).long())
    assert torch.equal(rel, scenes.labels % 4)
    main, other = d.abs().max(1).values, d.abs().min(1).values
    assert (main >= 1.4 * other).all()  # the dominant axis is clear
    # square vs diamond: area relative to the half-size (4 s^2 vs 2 s^2)
    ratio = cov_r.sum((1, 2)) / (scenes.half * 64) ** 2
    assert torch.equal(ratio < 3, scenes.labels // 4 == 1)
    # the circle's area is pi r^2
    assert torch.allclose(cov_c.sum((1, 2)), torch.pi * (scenes.radius * 64) ** 2, rtol=0.03)


def test_no_4x4_patch_at_32px_holds_both_objects():
    scenes = sample_scenes(range(400), seed=5)
    cov_c, cov_r = coverage(scenes, 32, 32)
    in_c = F.max_pool2d(cov_c[:, None], 4) > 0
    in_r = F.max_pool2d(cov_r[:, None], 4) > 0
    assert not (in_c & in_r).any()
    assert MIN_GAP * 32 >= 4 + 1  # a patch width plus the two antialiased half-pixel edges


def test_objects_share_their_phase_and_are_whole_cells_apart():
    """The patch grid (8 x 8 at 32 px / patch 4) cuts both objects alike: their offset is a whole number
    of cells along each axis. This is what leaves a bag of patches nothing to read the relation from."""
    scenes = sample_scenes(range(2000), seed=3)
    offset = (scenes.circle_xy - scenes.ref_xy) * CELLS
    torch.testing.assert_close(offset, offset.round(), **CELL)
    phase = (scenes.circle_xy * CELLS) % 1
    torch.testing.assert_close(phase, (scenes.ref_xy * CELLS) % 1, **CELL)
    # the phase itself is uniform whatever the class: its quartiles per relation sit near 1/4, 1/2, 3/4
    for rel in range(4):
        q = phase[scenes.labels % 4 == rel].quantile(torch.tensor([0.25, 0.5, 0.75]), dim=0)
        torch.testing.assert_close(q, torch.tensor([[0.25], [0.5], [0.75]]).expand(3, 2), atol=0.06, rtol=0)


def test_objects_never_touch_the_border():
    scenes = sample_scenes(range(2000), seed=4)
    for xy, size in ((scenes.circle_xy, scenes.radius), (scenes.ref_xy, scenes.half)):
        assert ((xy - size[:, None]) >= MARGIN - EDGE).all() and ((xy + size[:, None]) <= 1 - MARGIN + EDGE).all()


@pytest.mark.parametrize("sizes", [(SIZE_RANGE[0], SIZE_RANGE[0]), (SIZE_RANGE[1], SIZE_RANGE[1]),
                                   (SIZE_RANGE[0], SIZE_RANGE[1])])  # fmt: skip
def test_layouts_of_the_four_relations_are_mirrors_and_turns_of_each_other(sizes):
    """The layouts a class can draw, as sets: right = left mirrored, above = left transposed, below = above
    mirrored; so no class has a layout (or a share of border cells) the others lack."""
    from vitpos.data.shapes import _choose_layout

    u = (torch.arange(4000) + 0.5) / 4000  # every quantile: each valid layout is picked at least once
    r, s = (torch.full((4000,), v) for v in sizes)

    def layouts(rel: int) -> set[tuple[int, ...]]:
        cells = _choose_layout(torch.full((4000,), rel), r, s, u)
        return set(zip(*(c.tolist() for c in cells), strict=True))

    left, right, above, below = (layouts(rel) for rel in range(4))
    last = CELLS - 1
    assert len(left) > 50
    assert right == {(last - cx, cy, last - rx, ry) for cx, cy, rx, ry in left}
    assert above == {(cy, cx, ry, rx) for cx, cy, rx, ry in left}
    assert below == {(cx, last - cy, rx, last - ry) for cx, cy, rx, ry in above}


def test_pixels_show_the_objects_in_their_colours():
    scenes = sample_scenes(range(16), seed=9)
    imgs, _ = render_shapes(16, 48, 48, seed=9, noise=0)
    cov_c, cov_r = coverage(scenes, 48, 48)
    inside_c, inside_r, outside = cov_c == 1, cov_r == 1, (cov_c == 0) & (cov_r == 0)
    for i in range(16):
        px = imgs[i].permute(1, 2, 0)
        assert torch.allclose(px[inside_c[i]], scenes.circle_rgb[i].expand_as(px[inside_c[i]]), atol=PIXEL)
        assert torch.allclose(px[inside_r[i]], scenes.ref_rgb[i].expand_as(px[inside_r[i]]), atol=PIXEL)
        assert torch.allclose(px[outside[i]], scenes.bg[i].expand_as(px[outside[i]]), atol=PIXEL)
    assert ((scenes.circle_rgb - scenes.bg).abs().amax(1) >= 0.35).all()


def test_hflip_swaps_left_and_right():
    plain = ShapesDataset(64, 0, (16, 16), (0.5,) * 3, (0.5,) * 3)
    flip = ShapesDataset(64, 0, (16, 16), (0.5,) * 3, (0.5,) * 3, hflip=True)
    torch.manual_seed(0)
    items = flip.__getitems__(list(range(64)))
    swap = {0: 1, 1: 0, 4: 5, 5: 4}
    flipped = 0
    for i, (x, y) in enumerate(items):
        x0, y0 = plain[i]
        if torch.equal(x, x0):
            assert y == y0
        else:
            flipped += 1
            assert torch.equal(x, x0.flip(-1)) and y == swap.get(y0, y0)
    assert 10 < flipped < 54


def test_datamodule_splits_and_native_eval():
    cfg = DataConfig(name="shapes", train_size=96, val_size=40, test_size=24, batch_size=32)
    dm = build_datamodule(cfg, img_size=32, seed=1)
    assert (dm.num_classes, dm.in_chans, dm.native_size) == (8, 3, 32)
    assert BAG_OF_PATCHES_CEILING == 2 / NUM_CLASSES
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 3, 32, 32) and y.dtype == torch.int64
    assert len(dm.train_set) == 96 and len(dm.val_set) == 40
    dm.setup("test")
    assert len(dm.test_set) == 24
    # splits are different streams; the val set equals a native render, normalised
    xv = torch.stack([dm.val_set[i][0] for i in range(4)])
    xt = torch.stack([dm.test_set[i][0] for i in range(4)])
    assert (xv - xt).abs().mean() > 0.1
    ref, _ = render_shapes(4, 32, 32, seed=dm.split_seed("val"))
    assert torch.allclose(xv, (ref - 0.5) / 0.5, atol=2 / 255 / 0.5)
    # eval at another resolution renders natively; non-square works; cached per resolution
    ds = dm.eval_dataset(64, "val")
    assert ds[0][0].shape == (3, 64, 64) and ds[0][1] == dm.val_set[0][1]
    assert dm.eval_dataset((16, 48), "test")[3][0].shape == (3, 16, 48)
    assert dm.eval_dataset(64, "val") is ds
    with pytest.raises(ConfigError, match="split"):
        dm.eval_dataset(32, "holdout")


def test_lazy_rendering_matches_cached(monkeypatch):
    import vitpos.data.shapes as shapes

    cached = ShapesDataset(10, 4, (24, 24), (0.5,) * 3, (0.5,) * 3)
    monkeypatch.setattr(shapes, "_CACHE_BYTES", 0)
    lazy = ShapesDataset(10, 4, (24, 24), (0.5,) * 3, (0.5,) * 3)
    assert cached.images is not None and lazy.images is None
    for i in (0, 7, -1):
        assert torch.equal(cached[i][0], lazy[i][0]) and cached[i][1] == lazy[i][1]


@pytest.mark.parametrize("aug", [{"random_resized_crop": True}, {"randaugment": "rand-m9-mstd0.5"}])
def test_refuses_label_changing_augmentation(aug):
    with pytest.raises(ConfigError, match="shapes"):
        build_datamodule(DataConfig(name="shapes", **aug), 32)
