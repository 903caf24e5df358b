"""The coordinate seam: every scheme reads its patch coordinates from ``PosScheme.coords``, where position
augmentation (DINOv3's shift, jitter, rescale; ViTAR's fuzzy offsets) acts in training only.

* over the registry: augmentation off is the scheme as it was (training equals evaluation, bit for bit); on, it
  changes training outputs and never evaluation outputs; a scheme that reads no coordinates refuses it;
* the augmentation's geometry, in the grid frame and the normalised one, and `learned` sampling its table;
* `rope2d-norm` is rope2d on DINOv3's normalised coordinates with rescale 2 (a preset), as it was: coordinates,
  periods, ranges, relative in evaluation, fp32 under bf16, old checkpoints loading;
* ``--pos-aug``: a config field, saved in checkpoints, bad input a one-line error.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import TRAIN

import vitpos
from vitpos.pos import POS_REGISTRY, PosAug
from vitpos.pos.base import augment_coords, patch_coords, rotate

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = dict(rtol=0, atol=0)
FP32 = dict(rtol=1e-5, atol=1e-5)  # fp32 coordinates, rotations and logits of unit-scale vectors
LOGIT = dict(rtol=1e-4, atol=1e-4)  # logits of random q, k after two fp32 rotations each
VISIBLY = 1e-2  # a property that fails, fails by at least this much
SLACK = 1e-6  # fp32 rounding at the ends of a range a drawn scale must stay in
JITTER_SLACK = 1e-5  # the same for scales and shifts recovered from fp32 coordinates
AUG = "shift=0.2,jitter=1.3,rescale=1.5,fuzzy"  # every part on
TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def build(name: str, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    return vitpos.create_model(name, **{**TINY, **kw})


def readers(name: str) -> bool:
    """Whether scheme ``name`` (or a part of it) reads patch coordinates."""
    return any(POS_REGISTRY[part].frame is not None for part in name.split("+"))


# ---------------------------------------------------------------------------------------------
# over the registry
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_augmentation_changes_training_and_never_evaluation(name):
    x = torch.randn(2, 3, 32, 32)
    plain, off = build(name), build(name, pos_aug="off")
    with torch.no_grad():
        ref = plain.eval()(x)
        off_eval, off_train = off.eval()(x), off.train()(x)
    assert torch.equal(off_train, off_eval)  # off: nothing random, training is evaluation
    if name != "rope2d-norm":  # its own default is DINOv3's rescale 2
        assert torch.equal(off_eval, ref)
    if not readers(name):
        with pytest.raises(ValueError, match="position augmentation has nothing to act on"):
            build(name, pos_aug=AUG)
        return
    on = build(name, pos_aug=AUG)
    assert on.state_dict().keys() == off.state_dict().keys()
    with torch.no_grad():
        assert torch.equal(on.eval()(x), off_eval) and torch.equal(on(x), off_eval)  # deterministic, unchanged
        on.train()
        first, second = on(x), on(x)
    assert not torch.equal(first, off_train) and not torch.equal(first, second)  # a fresh draw per forward


def test_augmentation_draws_are_reproducible_from_the_seed():
    m = build("rope2d", pos_aug=AUG).train()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.manual_seed(3)
        a = m(x)
        torch.manual_seed(3)
        b = m(x)
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# the augmentation itself
# ---------------------------------------------------------------------------------------------


def test_pos_aug_text_form():
    assert PosAug.parse("shift=0.1, rescale=2,fuzzy") == PosAug(shift=0.1, rescale=2.0, fuzzy=0.5)
    assert str(PosAug.parse("jitter=1.5,fuzzy=0.25")) == "jitter=1.5,fuzzy=0.25"
    assert PosAug.parse(str(PosAug.parse(AUG))) == PosAug.parse(AUG)
    assert PosAug.parse("off") == PosAug.parse("none") == PosAug() and not PosAug().on
    for text, needle in [("shear=1", "unknown position augmentation 'shear'"), ("rescale=0.5", "rescale must be"),
                         ("shift", "shift needs a number"), ("shift=1,shift=2", "twice"), ("fuzzy=-1", "fuzzy must"),
                         ("jitter=inf", "jitter must")]:  # fmt: skip
        with pytest.raises(ValueError, match=needle) as e:
            PosAug.parse(text)
        assert "\n" not in str(e.value)


def test_grid_frame_augmentation_is_dinov3s_about_the_grid_centre():
    """Integer positions see the normalised frame's transformation in patch units: about the centre, shift * h/2."""
    grid = (8, 6)
    c = patch_coords(grid)
    centre, half = torch.tensor([3.5, 2.5]), torch.tensor([4.0, 3.0])
    for _ in range(20):
        torch.manual_seed(_)
        moved = augment_coords(c, PosAug(rescale=2.0), grid, "grid")
        s = (moved - centre) / (c - centre)
        assert s.min() >= 0.5 - SLACK and s.max() <= 2 + SLACK
        torch.testing.assert_close(s, s[0, 0].expand_as(s), **FP32)  # one scale, both axes, about the centre
        moved = augment_coords(c, PosAug(shift=0.5), grid, "grid")
        u = (moved - c)[0]
        torch.testing.assert_close(moved - c, u.expand_as(c), **FP32)  # one shift per axis
        assert (u.abs() <= 0.5 * half + SLACK).all()
    jittered = torch.stack([augment_coords(c, PosAug(jitter=1.5), grid, "grid")[0] for _ in range(50)])
    scale = (jittered - centre) / (c[0] - centre)  # per axis
    assert (scale[:, 0] != scale[:, 1]).all() and scale.min() >= 1 / 1.5 - SLACK and scale.max() <= 1.5 + SLACK


@pytest.mark.parametrize(("frame", "step"), [("grid", (1.0, 1.0)), ("separate", (2 / 8, 2 / 6)), ("max", (2 / 8,) * 2)])
def test_fuzzy_moves_every_token_on_its_own_by_up_to_f_patches(frame, step):
    grid = (8, 6)
    c = patch_coords(grid, frame)
    offsets = torch.stack([augment_coords(c, PosAug(fuzzy=0.5), grid, frame) - c for _ in range(40)])  # (draws, N, 2)
    patches = offsets / torch.tensor(step)
    assert patches.abs().max() <= 0.5 + SLACK and patches.abs().max() > 0.45
    assert patches[0].std(0).min() > 0.1  # independent per token, not one shared offset
    assert patches.mean().abs() < 0.05


def test_learned_samples_its_table_at_the_augmented_coordinates():
    m = build("learned", pos_aug="fuzzy").train()
    table = m.pos.table.detach().reshape(8, 8, -1)
    torch.manual_seed(1)
    served = m.pos.table_for(TRAIN)[0].detach()  # (N, D)
    torch.manual_seed(1)
    c = m.pos.coords(TRAIN)  # the same draw: (N, 2) normalised (y, x)
    y, x = (c[:, 0] + 1) * 4 - 0.5, (c[:, 1] + 1) * 4 - 0.5  # pixel coordinates of the 8x8 table (centres at i)
    y0, x0 = y.floor().long(), x.floor().long()
    wy, wx = (y - y0)[:, None], (x - x0)[:, None]

    def at(i, j):
        return table[i.clamp(0, 7), j.clamp(0, 7)]  # border values beyond the edges

    by_hand = ((1 - wy) * (1 - wx) * at(y0, x0) + (1 - wy) * wx * at(y0, x0 + 1)
               + wy * (1 - wx) * at(y0 + 1, x0) + wy * wx * at(y0 + 1, x0 + 1))  # fmt: skip
    torch.testing.assert_close(served, by_hand, **FP32)
    assert (served - table.reshape(64, -1)).abs().max() > 1e-3  # moved off the patch centres
    still = build("learned", pos_aug="shift=0").train()  # sampled at the unmoved centres: the table itself
    torch.testing.assert_close(still.pos.table_for(TRAIN), still.pos.table, **FP32)


# ---------------------------------------------------------------------------------------------
# rope2d-norm: a preset of rope2d
# ---------------------------------------------------------------------------------------------


def norm_coords_by_hand(grid, lengths):
    """DINOv3's construction: arange(0.5, n) / D, then 2c - 1, per axis; (N, 2) as (y, x)."""
    cy = (torch.arange(0.5, grid[0]) / lengths[0]) * 2 - 1
    cx = (torch.arange(0.5, grid[1]) / lengths[1]) * 2 - 1
    return torch.stack(torch.meshgrid(cy, cx, indexing="ij"), -1).reshape(-1, 2)


def test_rope2d_norm_is_rope2d_on_normalised_coordinates_with_rescale_2():
    norm = build("rope2d-norm")
    assert norm.pos.pos_aug == PosAug(rescale=2.0) and isinstance(norm.pos, POS_REGISTRY["rope2d"])
    plain = build("rope2d", pos_kwargs={"coords": "separate", "order": "yx"}, pos_aug="rescale=2")
    x, big = torch.randn(2, 3, 32, 32), torch.randn(1, 3, 48, 40)
    with torch.no_grad():
        for mode in ("eval", "train"):
            for norm_method, method in (("normalized", "interpolate"), ("extrapolate", "extrapolate")):
                norm.pos.method, plain.pos.method = norm_method, method
                norm.train(mode == "train"), plain.train(mode == "train")
                for images in (x, big):
                    torch.manual_seed(4)
                    a = norm(images)
                    torch.manual_seed(4)
                    assert torch.equal(a, plain(images)), (mode, method)
    with pytest.raises(ValueError, match="normalised"):
        build("rope2d-norm", pos_kwargs={"coords": "grid"})


@pytest.mark.parametrize("coords", ["separate", "min", "max"])
@pytest.mark.parametrize("grid", [TRAIN, (4, 10), (12, 6)], ids=str)
def test_rope2d_norm_coordinates_and_angles_follow_dinov3(coords, grid):
    m = build("rope2d-norm", embed_dim=64, pos_kwargs={"coords": coords}).eval()  # head dim 16
    m.pos.method = "normalized"  # DINOv3's: every grid onto [-1, 1]
    lengths = {"separate": grid, "min": (min(grid),) * 2, "max": (max(grid),) * 2}[coords]
    c = norm_coords_by_hand(grid, lengths)
    torch.testing.assert_close(m.pos.coords(grid), c, **FP32)
    if coords == "separate":  # patch centres fill [-1, 1] symmetrically on both axes
        assert c.min(0).values.tolist() == pytest.approx([-1 + 1 / grid[0], -1 + 1 / grid[1]])
        assert c.max(0).values.tolist() == pytest.approx([1 - 1 / grid[0], 1 - 1 / grid[1]])
    periods = 100.0 ** (2 * torch.arange(4) / 8)  # DINOv3: base^(2k / (D_head/2)), D_head/4 periods
    angles = 2 * math.pi * c[:, :, None] / periods  # (N, 2, d/4): row pairs first, then column pairs
    rot = m.pos.attn_pos(grid)[0].rope
    assert rot.dtype == torch.float32 and rot.shape == (grid[0] * grid[1], 8, 2)
    torch.testing.assert_close(rot[..., 0], angles.flatten(1).cos(), **FP32)
    torch.testing.assert_close(rot[..., 1], angles.flatten(1).sin(), **FP32)


def test_rope2d_norm_extrapolate_keeps_the_training_spacing():
    m = build("rope2d-norm").eval()
    big = (16, 12)
    c = m.pos.coords(big, ref=TRAIN)  # what ``extrapolate`` reads
    torch.testing.assert_close(c, norm_coords_by_hand(big, TRAIN), **FP32)
    step_y, step_x = c[big[1], 0] - c[0, 0], c[1, 1] - c[0, 1]
    assert float(step_y) == pytest.approx(2 / TRAIN[0]) and float(step_x) == pytest.approx(2 / TRAIN[1])
    assert float(c.max()) > 1.0  # a larger grid reaches beyond the trained [-1, 1]
    torch.testing.assert_close(c[: TRAIN[1]], m.pos.coords(TRAIN)[: TRAIN[1]], **EXACT)  # first row as trained
    c = m.pos.coords(big)  # ``normalized``: squeezed onto [-1, 1]
    assert float(c[1, 1] - c[0, 1]) == pytest.approx(2 / big[1]) and float(c.abs().max()) < 1.0
    rope = {}
    for method in ("extrapolate", "normalized"):  # the methods read exactly these
        m.pos.method = method
        rope[method] = m.pos.attn_pos(big)[0].rope
    m.pos.method = "normalized"
    norm = build("rope2d-norm").eval()
    norm.pos.train_grid = big  # a scheme trained at the large grid: its own spacing is the squeezed one
    assert torch.equal(rope["normalized"], norm.pos.attn_pos(big)[0].rope)
    assert not torch.equal(rope["extrapolate"], rope["normalized"])


def test_rope2d_norm_augments_only_in_training_with_dinov3_ranges(builds):
    m = build("rope2d-norm")  # released defaults: rescale 2, shift and jitter off
    base = m.pos.eval().coords(TRAIN)
    m.pos.train()
    ratios = torch.stack([m.pos.coords(TRAIN) / base for _ in range(200)])  # (draws, N, 2)
    per_draw = ratios[:, 0, 0]
    torch.testing.assert_close(ratios, per_draw[:, None, None].expand_as(ratios), **FP32)  # one shared scale
    assert per_draw.min() >= 0.5 - SLACK and per_draw.max() <= 2.0 + SLACK
    assert per_draw.min() < 0.6 and per_draw.max() > 1.7  # log-uniform over the whole range
    assert (per_draw.log().mean()).abs() < 0.15  # symmetric in log space
    m.eval()  # evaluation: deterministic and cached
    with torch.no_grad():
        x = torch.randn(2, 3, 32, 32)
        torch.testing.assert_close(m(x), m(x), **EXACT)
        misses = builds()
        m(x)
    assert builds() == misses


def test_rope2d_norm_shift_and_jitter():
    m = build("rope2d-norm", pos_aug="shift=0.5,jitter=1.5")
    base = m.pos.eval().coords(TRAIN)
    m.pos.train()
    shifts, scales = [], []
    for _ in range(200):
        c = m.pos.coords(TRAIN)
        # c = (base + u) * s per axis: s from the spread, u from the mean (base is centred)
        s = (c.max(0).values - c.min(0).values) / (base.max(0).values - base.min(0).values)
        scales.append(s)
        shifts.append(c.mean(0) / s - base.mean(0))
        torch.testing.assert_close(c, (base + shifts[-1]) * s, **FP32)
    scales, shifts = torch.stack(scales), torch.stack(shifts)
    assert scales.min() >= 1 / 1.5 - JITTER_SLACK and scales.max() <= 1.5 + JITTER_SLACK
    assert (scales[:, 0] != scales[:, 1]).all()  # jitter: one scale per axis
    assert shifts.abs().max() <= 0.5 + JITTER_SLACK and shifts.abs().max() > 0.4


def shifted_logits(rope_small, rope_big, small, big, shift, n=256):
    """Logits of random (q, k) at positions (p, r) of ``small`` and at (p + shift, r + shift) of ``big``."""
    d = 2 * rope_small.shape[-2]
    q, k = torch.randn(n, d), torch.randn(n, d)
    y1, y2 = torch.randint(0, small[0], (2, n))
    x1, x2 = torch.randint(0, small[1], (2, n))
    i, j = y1 * small[1] + x1, y2 * small[1] + x2
    bi, bj = (y1 + shift[0]) * big[1] + x1 + shift[1], (y2 + shift[0]) * big[1] + x2 + shift[1]
    here = (rotate(q, rope_small[i]) * rotate(k, rope_small[j])).sum(-1)
    there = (rotate(q, rope_big[bi]) * rotate(k, rope_big[bj])).sum(-1)
    return here, there, (q * k).sum(-1)


@pytest.mark.parametrize("method", POS_REGISTRY["rope2d-norm"].methods)
def test_rope2d_norm_is_relative_in_evaluation(method):
    m = build("rope2d-norm", embed_dim=64).eval()
    m.pos.method = method
    grid = (12, 12) if method == "normalized" else (13, 15)
    rope = m.pos.attn_pos(grid)[0].rope
    # normalized: within one grid, shifting both tokens; extrapolate: into a larger grid, spacing kept
    ref = m.pos.attn_pos(TRAIN)[0].rope if method == "extrapolate" else rope[
        (torch.arange(8)[:, None] * 12 + torch.arange(8)[None, :]).flatten()]  # fmt: skip
    here, there, plain = shifted_logits(ref, rope, TRAIN, grid, (3, 4))
    torch.testing.assert_close(there, here, **LOGIT)
    assert (here - plain).abs().max() > VISIBLY  # the rotation does something


def test_rope2d_norm_angles_stay_fp32_under_bf16_autocast():
    m = build("rope2d-norm", pos_kwargs={"theta": 10000.0}).eval()
    grid = (40, 40)
    m.pos.method = "extrapolate"  # coordinates up to 9, where bf16 (8 bits of mantissa) is off by 1/32
    ref = m.pos.attn_pos(grid)[0].rope
    m.pos._cache.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rope = m.pos.attn_pos(grid)[0].rope
        out = m(torch.randn(1, 3, 160, 160))
    assert out.dtype == torch.bfloat16 and rope.dtype == torch.float32
    torch.testing.assert_close(rope, ref, **EXACT)
    m.pos.train()
    torch.manual_seed(0)
    ref = m.pos.attn_pos(grid)[0].rope
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(m.pos.attn_pos(grid)[0].rope, ref, **EXACT)  # augmented, too


@pytest.mark.parametrize(("kwargs", "aug"), [({}, "rescale=2"), ({"base": 50.0, "normalize": "max", "shift": 0.1,
                                                                   "rescale": None}, "shift=0.1")])  # fmt: skip
def test_an_old_rope2d_norm_checkpoint_loads_with_its_options(tmp_path, kwargs, aug):
    from vitpos.checkpoint import load_checkpoint, model_from_checkpoint
    from vitpos.config import Config

    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = "rope2d-norm", 64, 4, 1
    cfg.model.pos_kwargs = dict(kwargs)
    saved = cfg.to_dict()
    del saved["model"]["pos_aug"]  # format 5 had no such field
    state = {f"model.{k}": v for k, v in build("rope2d", embed_dim=64, depth=1, num_classes=10).state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": {"config": saved}, "vitpos_format": 5}, tmp_path / "a.ckpt")
    model_cfg = load_checkpoint(tmp_path / "a.ckpt")["hyper_parameters"]["config"]["model"]
    assert model_cfg["pos_kwargs"] == {k: v for k, v in {"theta": 50.0, "coords": "max"}.items() if kwargs}
    _, model = model_from_checkpoint(tmp_path / "a.ckpt")
    assert str(model.pos.pos_aug) == aug
    theta, lengths = (50.0, (8, 8)) if kwargs else (100.0, TRAIN)  # max(8, 8) or separate: the same on 8x8
    angles = 2 * math.pi * norm_coords_by_hand(TRAIN, lengths)[:, :, None] / theta ** (2 * torch.arange(4) / 8)
    torch.testing.assert_close(model.pos.attn_pos(TRAIN)[0].rope[..., 1], angles.flatten(1).sin(), **FP32)


# ---------------------------------------------------------------------------------------------
# --pos-aug
# ---------------------------------------------------------------------------------------------


def test_pos_aug_is_a_saved_config_field(tmp_path):
    from vitpos.cli import build_parser, config_from_args
    from vitpos.config import model_from_config

    cfg = config_from_args(build_parser().parse_args(["--pos", "learned", "--pos-aug", "fuzzy=0.3,shift=0.1"]))
    assert cfg.model.pos_aug == "fuzzy=0.3,shift=0.1" and cfg.to_dict()["model"]["pos_aug"] == cfg.model.pos_aug
    assert model_from_config(cfg).pos.pos_aug == PosAug(shift=0.1, fuzzy=0.3)
    cfg = config_from_args(build_parser().parse_args(["--pos", "rope2d-norm", "--pos-aug", "off"]))
    assert not model_from_config(cfg).pos.pos_aug.on


@pytest.mark.parametrize(("argv", "needle"), [
    (["--pos-aug", "rescale=half"], "--pos-aug rescale=half: position augmentation rescale needs a number"),
    (["--pos-aug", "blur=1"], "--pos-aug blur=1: unknown position augmentation 'blur'"),
    (["--pos", "relbias", "--pos-aug", "fuzzy"], "reads no patch coordinates"),
    (["--pos", "relbias+peg", "--pos-aug", "shift=0.1"], "no part of relbias+peg reads patch coordinates"),
])  # fmt: skip
def test_a_bad_pos_aug_is_one_line_and_exit_2(argv, needle, tmp_path, capsys):
    from vitpos.training import main

    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "run").exists()


def test_rope2d_norm_sampling_matches_grid_sample_convention():
    """The normalised frame puts patch centres where grid_sample (align_corners=False) reads pixel centres."""
    image = torch.arange(48.0).reshape(1, 1, 6, 8)
    c = patch_coords((6, 8), "separate")
    out = F.grid_sample(image, c.flip(-1)[None, None], mode="bilinear", align_corners=False)
    torch.testing.assert_close(out.flatten(), image.flatten(), **FP32)
