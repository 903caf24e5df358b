"""timm interop: from_timm / to_timm are exact, every scheme carries its parameters to a new grid, and
pretrained weights start a fine-tuning run or an evaluation (no downloads: small random timm models)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import vitpos
from vitpos import interop
from vitpos.errors import ConfigError
from vitpos.interop import from_timm, rope_dim_order, to_timm
from vitpos.pos import POS_REGISTRY, POS_SCHEMES
from vitpos.pos.base import PosScheme
from vitpos.pretrained import load_pretrained, transfer_weights
from vitpos.training import main as train_main

EQUIV_RTOL = 1e-5  # max |vitpos - timm| / max |timm| over the logits
DIFFERENT = 1e-3  # a method that does not reproduce timm misses it by at least this much
CARRIED = dict(rtol=0, atol=1e-6)  # fp32 weights carried (copied or resampled) against the same done by hand
SMALL = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=5)
NEW = (48, 40)  # a new, non-square size: grid 12 x 10 against the trained 8 x 8
TINY_RUN = ["--batch-size", "16", "--train-size", "48", "--val-size", "16", "--test-size", "16", "--epochs", "1"]


@pytest.fixture(autouse=True)
def _threads(one_thread):
    yield


def randomize(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Every parameter far from its init (zero biases, zero relative tables and 1e-5 LayerScale would hide
    a wrong mapping); rope-mixed frequencies perturbed around theirs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("freqs"):
                p.mul_(1 + 0.3 * noise)
            else:
                p.copy_((1.0 if "norm" in name and name.endswith("weight") else 0.0) + 0.3 * noise)
    return model


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


# (timm model, size keywords beyond SMALL, the vitpos scheme, the method that reproduces timm at a new size)
FAMILIES = [
    ("vit_tiny_patch16_224", dict(global_pool="avg", class_token=False), "learned", "bicubic"),
    ("vit_tiny_patch16_224", dict(), "learned", "bicubic"),  # class-token entry in the table: folded
    ("vit_tiny_patch16_224", dict(pos_embed="none", global_pool="avg"), "none", "none"),
    ("deit3_small_patch16_224", dict(), "learned", "bicubic"),  # no_embed_class, LayerScale
    ("vit_small_patch16_rope_224", dict(), "rope2d", "extrapolate"),
    ("vit_small_patch16_rope_ape_224", dict(), "rope2d+learned", "extrapolate+bicubic"),
    ("vit_small_patch16_rope_mixed_224", dict(), "rope2d-mixed", "extrapolate"),
    ("vit_small_patch16_rope_mixed_ape_224", dict(), "rope2d-mixed+learned", "extrapolate+bicubic"),
    ("vit_small_patch16_rope_224", dict(rope_grid_indexing="ij"), "rope2d", "extrapolate"),
    ("vit_small_patch16_rope_224", dict(rope_rotate_half=True), "rope2d", "extrapolate"),
    ("vit_small_patch16_rope_mixed_224", dict(rope_grid_indexing="ij"), "rope2d-mixed", "extrapolate"),
    ("beit_base_patch16_224", dict(), "relbias", "geometric"),
    ("beit_base_patch16_224", dict(use_shared_rel_pos_bias=True), "relbias", "geometric"),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for n, kw, _, _ in FAMILIES]


def scheme_of(v: vitpos.ViT) -> str:
    """The registry name of a model's scheme."""
    if hasattr(v.pos, "parts"):
        return "+".join(v.pos.parts)
    return next(name for name, cls in POS_REGISTRY.items() if type(v.pos) is cls)


def timm_model(name: str, **kw) -> torch.nn.Module:
    if not name.startswith("beit"):
        kw["dynamic_img_size"] = True  # timm then serves any size itself; BEiT has set_input_size only
    return randomize(timm.create_model(name, pretrained=False, **SMALL, **kw)).eval()


@pytest.mark.parametrize(("name", "kw", "scheme", "method"), FAMILIES, ids=IDS)
def test_from_timm_same_logits_at_own_and_new_size(name, kw, scheme, method):
    t = timm_model(name, **kw)
    v = from_timm(t)
    assert type(v) is vitpos.ViT and not v.training and scheme_of(v) == scheme
    x = torch.randn(2, 3, 32, 32)
    x_new = torch.randn(2, 3, *NEW)
    with torch.no_grad():
        assert rel_err(v(x), t(x)) <= EQUIV_RTOL
        if name.startswith("beit"):
            t.set_input_size(NEW)  # BEiT's own way to a new size: its tables resized (geometric)
        ref = t(x_new)
        errors = {}
        for m in v.pos.methods:
            v.pos.method = m
            errors[m] = rel_err(v(x_new), ref)
    assert errors[method] <= EQUIV_RTOL, errors
    assert all(e > DIFFERENT for m, e in errors.items() if m != method), errors  # the named method, no other


def test_from_timm_eva_attention_with_qv_bias_and_rope():
    """EVA's own attention (q/v bias only) under a rotation: the q bias is permuted with the q rows."""
    from timm.models.eva import Eva

    t = randomize(Eva(**SMALL, attn_type="eva", use_rot_pos_emb=True, rope_grid_indexing="ij", init_values=0.1,
                      rope_temperature=100.0, dynamic_img_size=True)).eval()  # fmt: skip
    v = from_timm(t)
    assert v.blocks[0].attn.qv_bias and scheme_of(v) == "rope2d+learned"  # its table has a class entry: folded
    x, x_new = torch.randn(2, 3, 32, 32), torch.randn(2, 3, *NEW)
    with torch.no_grad():
        assert rel_err(v(x), t(x)) <= EQUIV_RTOL
        v.pos.method = "extrapolate+bicubic"  # what timm does at a new size (the default is interpolate+bicubic)
        assert rel_err(v(x_new), t(x_new)) <= EQUIV_RTOL


@pytest.mark.parametrize("kw", [dict(rope_grid_indexing="ij"), dict(rope_rotate_half=True)], ids=["ij", "half"])
def test_rope_layout_mapping_is_needed(kw, monkeypatch):
    """Negative control: without the q/k row permutation these layouts compute something else."""
    t = timm_model("vit_small_patch16_rope_224", **kw)
    x = torch.randn(2, 3, 32, 32)
    monkeypatch.setattr(interop, "rope_dim_order", lambda d, *a, **k: torch.arange(d))
    with torch.no_grad():
        assert rel_err(from_timm(t)(x), t(x)) > DIFFERENT


def test_rope_dim_order_pins_the_layouts():
    # head_dim 8: vitpos pairs (0,1) x*f0, (2,3) x*f1, (4,5) y*f0, (6,7) y*f1
    assert rope_dim_order(8, "xy", False).tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert rope_dim_order(8, "ij", False).tolist() == [4, 5, 6, 7, 0, 1, 2, 3]  # timm's y pairs come first
    assert rope_dim_order(8, "xy", True).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]  # rotate-half pairs (p, p + d/2)
    assert rope_dim_order(8, "ij", True).tolist() == [2, 6, 3, 7, 0, 4, 1, 5]


def test_from_timm_refuses_what_it_cannot_express():
    with pytest.raises(ConfigError, match="register tokens"):
        from_timm(timm.create_model("test_vit2"))
    with pytest.raises(ConfigError, match="not supported"):
        from_timm(timm.create_model("test_resnet"))
    with pytest.raises(ConfigError, match="without bias"):
        from_timm(timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL, proj_bias=False))
    with pytest.raises(ConfigError, match="MLP"):
        from_timm(timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, depth=1))


TO_TIMM = [
    ("learned", dict()),
    ("learned", dict(class_token=True, global_pool="token", layer_scale_init=0.1, norm_eps=1e-6)),
    ("none", dict(fc_norm=True, qkv_bias="none")),
    ("rope2d", dict(class_token=True, global_pool="token", layer_scale_init=1e-5)),
    ("rope2d", dict(qkv_bias="qv", fc_norm=True)),
    ("rope2d-mixed", dict()),
    ("rope2d+learned", dict(class_token=True)),
    ("rope2d-mixed+learned", dict(class_token=True, fc_norm=True)),
    ("relbias", dict(class_token=True, fc_norm=True, qkv_bias="qv", layer_scale_init=0.1)),
    ("relbias", dict(class_token=True, global_pool="token")),
]


@pytest.mark.parametrize(("pos", "kw"), TO_TIMM, ids=[f"{p}-{i}" for i, (p, _) in enumerate(TO_TIMM)])
def test_to_timm_round_trip(pos, kw, tiny):
    v = randomize(tiny(pos, **kw)).eval()
    t = vitpos.to_timm(v)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert rel_err(t(x), v(x)) <= EQUIV_RTOL
        back = vitpos.from_timm(t)
        assert rel_err(back(x), v(x)) <= EQUIV_RTOL
    assert back.pos.method == v.pos.method and type(back.pos) is type(v.pos)
    ours, again = v.state_dict(), back.state_dict()
    for k in ours.keys() & again.keys():
        assert torch.equal(ours[k], again[k]), k
    # only how a q/v bias is stored may differ: timm's Eva writes it as a full one (zeros for k); BEiT keeps q and v
    assert all(".attn." in k and "bias" in k for k in ours.keys() ^ again.keys()), ours.keys() ^ again.keys()


@pytest.mark.parametrize(("pos", "kw", "needle"), [("sincos2d", {}, "no model"), ("relbias", {}, "class token"),
                                                   ("learned", {"stem": "conv"}, "patch stem")])  # fmt: skip
def test_to_timm_refuses_what_timm_cannot_express(pos, kw, needle, tiny):
    with pytest.raises(ConfigError, match=needle):
        to_timm(tiny(pos, **kw))


def test_relbias_prefix_bias_fills_class_rows_and_columns_in_order(tiny):
    assert "pos.prefix_bias" not in dict(tiny("relbias").named_parameters())  # only with prefix tokens
    m = tiny("relbias", class_token=True)
    assert m.pos.prefix_bias.shape == (2, 4, 3) and not m.pos.prefix_bias.any()  # zero-init
    with torch.no_grad():
        m.pos.prefix_bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
        bias = m.pos.bias((8, 8))  # (depth, heads, 1 + 64, 1 + 64)
    assert (bias[:, :, 0, 1:] == 1).all()  # prefix query -> patch key
    assert (bias[:, :, 1:, 0] == 2).all()  # patch query -> prefix key
    assert (bias[:, :, 0, 0] == 3).all()  # prefix -> prefix


def test_checkpoint_from_before_prefix_bias_still_loads(tmp_path):
    """relbias with a class token once had fixed zero class rows; such a checkpoint loads and computes the same."""
    from vitpos.config import Config, model_from_config

    cfg = Config()
    cfg.model.pos, cfg.model.class_token, cfg.model.num_classes = "relbias", True, 5
    cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = 32, 2, 4
    m = randomize(model_from_config(cfg)).eval()
    with torch.no_grad():
        m.pos.prefix_bias.zero_()
    old = {f"model.{k}": v for k, v in m.state_dict().items() if not k.endswith("prefix_bias")}
    ckpt = {"state_dict": old, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": 2}
    torch.save(ckpt, tmp_path / "old.ckpt")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(vitpos.load_model(tmp_path / "old.ckpt")(x), m(x), rtol=0, atol=0)


def carried_as(part: str, method: str) -> str | None:
    """The method of the original a part's carried state reproduces at the new grid (None: it cannot).

    A parameter sized by the grid is carried by the method itself (learned, relbias); a scheme without one
    is rebuilt at the new grid, which it then serves as its training grid: integer positions, i.e.
    extrapolation (sincos2d, the ropes, alibi2d, lookhere). cpb's MLP carries over unchanged and normalises
    offsets by the new grid: its ``normalized``; rope2d-norm's normalised coordinates and fire's
    progressive normalisation serve every grid alike.
    liere's generators are rescaled so that either method keeps its spacing; peg rebuilt at the new grid dilates
    nothing there: its ``conv``."""
    if part in ("learned", "relbias", "none"):
        return method
    if part == "peg":
        return method if method == "conv" else None
    if part == "cpb":
        return "normalized"
    if part == "liere":  # its generators are rescaled to keep the method's spacing
        return method
    if part == "rope2d-norm":  # normalised coordinates: any grid is served alike
        return method if method == "normalized" else None
    if part == "fire":  # normalised by the grid's edges: any grid is served alike
        return method if method == "progressive" else None
    return method if method == "extrapolate" else None


@pytest.mark.parametrize("pos", POS_SCHEMES)
def test_carry_reproduces_the_transfer_method(pos, tiny):
    src = randomize(tiny(pos, class_token=True)).eval()
    x = torch.randn(2, 3, *NEW)
    checked = []
    with torch.no_grad():
        for m in src.pos.methods:
            parts = [carried_as(p, pm) for p, pm in zip(pos.split("+"), m.split("+"), strict=True)]
            if None in parts:
                continue
            src.pos.method = m
            dst = tiny(pos, class_token=True, img_size=NEW).eval()
            transfer_weights(src, dst)
            src.pos.method = "+".join(parts)
            assert rel_err(dst(x), src(x)) <= EQUIV_RTOL, (m, rel_err(dst(x), src(x)))
            checked.append(m)
    # the default method carries, except one that rescales a new grid's frequencies or positions (`interpolate` of
    # rope2d, sincos2d and what contains them; `yarn`, string's; `scaled`, pape's and alibi2d+peg's): a model trained
    # at the new grid has nothing carried and computes `extrapolate`; and rope2d-norm's `extrapolate`, the trained
    # spacing, which a scheme rebuilt at the new grid cannot keep: it normalises by that grid, its `normalized`
    default = src.pos.methods[0]
    rescales = {"interpolate", "yarn", "ntk", "scaled"} & set(default.split("+"))
    spacing = pos == "rope2d-norm" and default == "extrapolate"
    assert default in checked or (rescales and "extrapolate" in checked[0]) or (spacing and checked == ["normalized"])


@pytest.mark.parametrize("pos", POS_SCHEMES)
def test_a_fine_tuning_run_starts_where_the_default_method_serves_its_size(pos):
    """``--init-from`` at a new size (apply_architecture, then transfer_weights): the model a fine-tuning run starts
    from computes what its source computes there by the default method. A scheme with nothing sized by the grid is
    kept at its training grid (``pos_grid``) and serves the new one by that method; one with a grid-sized state
    carries it there. A composition with a grid-sized part carries it and rebuilds the rest: its start is named
    (test_carry_reproduces_the_transfer_method), not claimed here."""
    from vitpos.config import Config, model_from_config
    from vitpos.pretrained import ARCH_FIELDS, Pretrained, apply_architecture

    cfg = Config()
    cfg.model.pos, cfg.model.class_token = pos, True
    for k, v in SMALL.items():
        setattr(cfg.model, k, v)
    src = randomize(model_from_config(cfg)).eval()
    arch = {k: getattr(cfg.model, k) for k in ARCH_FIELDS}
    new = Config()
    new.model.img_size, new.model.num_classes = NEW[0], SMALL["num_classes"]  # img_size is one number: square
    apply_architecture(new.model, Pretrained("src", src, arch, cfg.model.img_size))
    dst = model_from_config(new).eval()
    notes = transfer_weights(src, dst)
    kept = src.pos.serves_by_method
    assert (new.model.pos_grid == [8, 8]) == kept and dst.grid == (12, 12)
    said = f"position kept at its 8x8 training grid, 12x12 served by '{src.pos.methods[0]}'"
    assert (said in notes) == kept, notes
    carries = type(src.pos).state_at_grid is not PosScheme.state_at_grid
    if not kept and carries and "+" in pos:
        return
    x = torch.randn(2, 3, NEW[0], NEW[0])
    with torch.no_grad():
        assert rel_err(dst(x), src(x)) <= EQUIV_RTOL, rel_err(dst(x), src(x))
    if kept and src.pos.methods[0] == "interpolate":  # rebuilt at the new grid, it would start as `extrapolate`
        rebuilt = model_from_config(Config.from_dict(new.to_dict() | {"model": vars(new.model) | {"pos_grid": []}}))
        transfer_weights(src, rebuilt.eval())
        with torch.no_grad():
            assert rel_err(rebuilt(x), dst(x)) > DIFFERENT


def test_carry_reinitialises_a_head_for_other_classes(tiny):
    src = randomize(tiny("learned")).eval()
    dst = tiny("learned", num_classes=3, img_size=NEW)
    head = dst.head.weight.clone()
    notes = transfer_weights(src, dst)
    assert any("head re-initialised: 5 classes in the weights, 3 in the data" in n for n in notes)
    assert torch.equal(dst.head.weight, head) and torch.equal(
        dst.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight
    )
    with pytest.raises(ConfigError, match="do not fit"):
        transfer_weights(src, tiny("learned", embed_dim=16))


# -- fine-tuning and evaluation from pretrained weights --------------------------------------------------
def test_finetune_from_a_vitpos_checkpoint_at_a_new_size(tmp_path, capsys):
    src = tmp_path / "src"
    arch = ["--pos", "relbias", "--class-token", "--embed-dim", "32", "--depth", "1", "--num-heads", "2"]
    assert train_main([*arch, "--out", str(src), *TINY_RUN]) == 0
    source = vitpos.load_model(src / "checkpoints" / "last.ckpt")
    dst = tmp_path / "dst"
    # the checkpoint fixes the architecture: a flag that contradicts it is refused, naming both values
    argv = ["--init-from", str(src / "checkpoints" / "last.ckpt"), "--img-size", "48",
            "--lr", "1e-12", "--warmup-epochs", "0", "--out", str(dst), *TINY_RUN]  # fmt: skip
    capsys.readouterr()
    assert train_main([*argv, "--pos", "rope2d", "--embed-dim", "32"]) == 2  # (32 is the checkpoint's: no clash)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--pos rope2d (the weights: relbias)" in err and "embed" not in err, err
    assert not dst.exists()
    assert train_main(argv) == 0  # lr ~0 keeps the start
    log = capsys.readouterr().out
    assert "position carried from grid 8x8 to 12x12 by 'resize'" in log
    tuned = vitpos.load_model(dst / "checkpoints" / "last.ckpt")
    assert tuned.grid == (12, 12) and type(tuned.pos).__name__ == "RelBiasPos"
    expected = source.pos.state_at_grid((12, 12))
    torch.testing.assert_close(tuned.pos.table, expected["table"], **CARRIED)
    torch.testing.assert_close(tuned.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight, **CARRIED)


def test_finetune_from_a_converted_timm_model(tmp_path, capsys):
    from safetensors.torch import save_file

    t = randomize(timm.create_model("test_vit")).eval()  # 160 px, patch 16, 1000 classes, class token
    weights = tmp_path / "test_vit.safetensors"
    save_file({k: v.contiguous() for k, v in t.state_dict().items()}, str(weights))
    argv = ["--init-from", str(weights), "--init-arch", "test_vit", "--img-size", "64", "--lr", "1e-12",
            "--warmup-epochs", "0", "--out", str(tmp_path / "run"), *TINY_RUN]  # fmt: skip
    capsys.readouterr()
    assert train_main(argv) == 0
    log = capsys.readouterr().out
    assert "head re-initialised: 1000 classes in the weights, 8 in the data" in log
    assert "position carried from grid 10x10 to 4x4 by 'bicubic'" in log
    tuned = vitpos.load_model(tmp_path / "run" / "checkpoints" / "last.ckpt")
    ref = from_timm(t)
    torch.testing.assert_close(tuned.pos.table, ref.pos.table_for((4, 4)), **CARRIED)
    torch.testing.assert_close(tuned.blocks[1].mlp.fc1.weight, ref.blocks[1].mlp.fc1.weight, **CARRIED)
    assert tuned.head.out_features == 8


class _Runs:
    """A pickled object whose unpickling would run code (it would create ``marker``)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--init-from", "{evil}", "--init-arch", "test_vit"], "would run code"),
        (["--init-from", "{weights}", "--init-arch", "not_a_vit"], "unknown timm architecture 'not_a_vit'"),
        (["--init-from", "{weights}"], "pass --init-arch"),
        (["--init-from", "timm:not_a_vit"], "unknown timm architecture"),  # checked before any download
        (
            ["--init-from", "{weights}", "--init-arch", "test_vit", "--data", "digits", "--img-size", "32"],
            "takes 3 input channel(s); data 'digits' has 1",
        ),  # fmt: skip
        (["--init-from", "{weights}", "--init-arch", "test_vit", "--img-size", "40"], "multiple of the patch size 16"),
    ],
    ids=["unsafe-pickle", "unknown-arch", "no-arch", "unknown-timm", "in-chans", "patch"],
)
def test_bad_init_from_is_one_line_exit_2(argv, needle, tmp_path, capsys):
    from safetensors.torch import save_file

    marker = tmp_path / "code-ran"
    torch.save({"blocks.0.x": _Runs(str(marker))}, tmp_path / "evil.pth")
    save_file({k: v.contiguous() for k, v in timm.create_model("test_vit").state_dict().items()},
              str(tmp_path / "w.safetensors"))  # fmt: skip
    subs = {"{evil}": str(tmp_path / "evil.pth"), "{weights}": str(tmp_path / "w.safetensors"), "{tmp}": str(tmp_path)}
    argv = [subs.get(a, a) for a in argv]
    assert train_main([*argv, "--out", str(tmp_path / "run"), *TINY_RUN]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("train.py: error:"), err
    assert needle in err
    assert not marker.exists()


def test_timm_spec_downloads_only_when_asked(monkeypatch):
    """``timm:NAME`` asks timm for pretrained weights; a weights file never does (timm is stubbed: no network)."""
    calls = []
    real = timm.create_model

    def fake(name, pretrained=False, **kw):
        calls.append((name, pretrained))
        return real("vit_tiny_patch16_224", pretrained=False, **{**SMALL, **kw})

    monkeypatch.setattr(timm, "create_model", fake)
    pre = load_pretrained("timm:vit_tiny_patch16_224")
    assert calls == [("vit_tiny_patch16_224", True)]
    assert pre.data_config["crop_pct"] == pytest.approx(0.9) and pre.img_size == 32
    with pytest.raises(ConfigError, match="contradicts"):
        load_pretrained("timm:vit_tiny_patch16_224", "vit_small_patch16_224")


def _image_folder(root, classes: int = 3, per_class: int = 3) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            d = root / split / f"c{c}"
            d.mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 255, (50 + 9 * i, 70, 3), dtype=np.uint8)).save(d / f"{i}.png")


def test_evaluate_init_from_uses_the_models_own_preprocessing(tmp_path):
    from safetensors.torch import save_file
    from timm.data import create_transform, resolve_data_config
    from torchvision.datasets import ImageFolder

    from vitpos.data import build_datamodule
    from vitpos.evaluate import EvalData, _eval_config, main, pretrained_config

    _image_folder(tmp_path / "imgs")
    t = randomize(timm.create_model("test_vit", num_classes=3)).eval()  # crop_pct .95, mean/std .5
    weights = tmp_path / "tv.safetensors"
    save_file({k: v.contiguous() for k, v in t.state_dict().items()}, str(weights))
    # the evaluator's images are timm's own eval transform's, tensor for tensor
    cfg = _eval_config(pretrained_config(load_pretrained(str(weights), "test_vit")),
                       EvalData(name="imagefolder", data_dir=str(tmp_path / "imgs")))  # fmt: skip
    assert (cfg.data.crop_ratio, cfg.data.mean, cfg.data.interpolation) == (0.95, [0.5] * 3, "bicubic")
    ours = build_datamodule(cfg.data, img_size=cfg.model.img_size).eval_dataset(160, "val")
    theirs = ImageFolder(str(tmp_path / "imgs" / "val"), transform=create_transform(**resolve_data_config({}, model=t)))
    for i in range(len(theirs)):
        torch.testing.assert_close(ours[i][0], theirs[i][0], **CARRIED)
    with torch.no_grad():
        x = torch.stack([theirs[i][0] for i in range(len(theirs))])
        timm_correct = int((t(x).argmax(-1) == torch.tensor([y for _, y in theirs.samples])).sum())
    common = ["--init-from", str(weights), "--init-arch", "test_vit", "--data", "imagefolder", "--data-dir",
              str(tmp_path / "imgs"), "--resolutions", "160", "96"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "ev")]) == 0
    records = {r["resolution"]: r for r in json.loads((tmp_path / "ev" / "resolution.json").read_text())}
    assert records[160]["correct"] == timm_correct and records[160]["crop_ratio"] == 0.95
    assert records[160]["train_resolution"] == 160 and records[96]["samples"] == 9
    assert main([*common, "--crop-ratio", "1.0", "--out", str(tmp_path / "ev2")]) == 0  # a flag overrides it
    assert all(r["crop_ratio"] == 1.0 for r in json.loads((tmp_path / "ev2" / "resolution.json").read_text()))


def test_evaluate_init_from_needs_a_data_set(tmp_path, capsys):
    from safetensors.torch import save_file

    from vitpos.evaluate import main

    save_file({k: v.contiguous() for k, v in timm.create_model("test_vit").state_dict().items()},
              str(tmp_path / "w.safetensors"))  # fmt: skip
    argv = ["--init-from", str(tmp_path / "w.safetensors"), "--init-arch", "test_vit", "--resolutions", "160",
            "--out", str(tmp_path / "ev")]  # fmt: skip
    assert main(argv) == 2
    assert "--data" in capsys.readouterr().err


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
