"""Checkpoints written by an older vitpos load and compute exactly what they did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from timm.layers import apply_rot_embed_cat

import vitpos.pos.base
from vitpos.checkpoint import FORMAT, config_from_checkpoint, load_checkpoint, model_from_checkpoint
from vitpos.config import Config, ConfigError, model_from_config
from vitpos.optim import param_groups

pytestmark = pytest.mark.usefixtures("one_thread")

SAME_MODEL = dict(atol=1e-5, rtol=1e-5)  # one model's fp32 logits, before and after its checkpoint's upgrade
MISREAD = 1e-3  # weights read under the wrong rotation pairing move the logits by at least this


def rotate_half(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Format 1's rotation: pairs (x[j], x[j + d/2]) with the same angles, in timm's rotate-half form."""
    cos, sin = torch.cat([rot[..., 0], rot[..., 0]], -1), torch.cat([rot[..., 1], rot[..., 1]], -1)
    return apply_rot_embed_cat(x, torch.cat([sin, cos], -1), half=True)


def old_checkpoint(tmp_path, pos: str, class_token: bool = False):
    """A format-1 checkpoint file (no ``vitpos_format``) whose AdamW moments equal the weights, and its model."""
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = pos, 32, 2, 2
    cfg.model.class_token, cfg.model.global_pool = class_token, "token" if class_token else "avg"
    torch.manual_seed(0)
    model = model_from_config(cfg)
    with torch.no_grad():  # sharp attention, so that how q and k are paired shows in the logits
        for block in model.blocks:
            block.attn.qkv.weight.mul_(30)
    opt = torch.optim.AdamW(param_groups(model, 0.05, 1e-3))
    model(torch.randn(2, 3, 32, 32)).square().mean().backward()
    opt.step()
    for p in model.parameters():  # moments that name their parameter, to follow them through the upgrade
        opt.state[p]["exp_avg"] = p.detach().clone()
        opt.state[p]["exp_avg_sq"] = p.detach().clone()
    path = tmp_path / f"{pos}.ckpt"
    torch.save({
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": {"config": cfg.to_dict()},
        "optimizer_states": [opt.state_dict()],
    }, path)  # fmt: skip
    return path, model.eval()


@pytest.mark.parametrize("pos,class_token", [("rope2d", False), ("rope2d", True), ("rope2d-mixed", False),
                                             ("rope2d+peg", False), ("rope2d+learned", True)])  # fmt: skip
def test_format1_rope_checkpoint_computes_what_it_did(tmp_path, monkeypatch, pos, class_token):
    path, old = old_checkpoint(tmp_path, pos, class_token)
    x = torch.randn(2, 3, 40, 24)  # an unseen, non-square grid
    with torch.no_grad():
        with monkeypatch.context() as mp:
            mp.setattr(vitpos.pos.base, "rotate", rotate_half)
            before = old(x)
        misread = old(x)  # the old weights under the new pairing: a different model
        _, new = model_from_checkpoint(path)
        after = new(x)
    torch.testing.assert_close(after, before, **SAME_MODEL)
    assert not torch.allclose(misread, before, atol=MISREAD)


@pytest.mark.parametrize("pos", ["rope2d", "rope2d-mixed"])
def test_format1_upgrade_moves_adamw_moments_with_their_rows(tmp_path, pos):
    path, _ = old_checkpoint(tmp_path, pos)
    raw = torch.load(path, weights_only=True)
    ckpt = load_checkpoint(path)
    assert ckpt["vitpos_format"] == FORMAT
    state = ckpt["state_dict"]
    moved = [k for k in state if not torch.equal(state[k], raw["state_dict"][k])]
    assert sorted(moved) == sorted(f"model.blocks.{i}.attn.qkv.{w}" for i in range(2) for w in ("weight", "bias"))
    weights = {t.shape: [] for t in state.values()}
    for v in state.values():
        weights[v.shape].append(v)
    for moments in ckpt["optimizer_states"][0]["state"].values():  # each moment still equals its weight
        for key in ("exp_avg", "exp_avg_sq"):
            assert any(torch.equal(moments[key], w) for w in weights[moments[key].shape])


@pytest.mark.parametrize("pos", ["relbias", "learned", "none"])
def test_format1_without_rotation_is_left_as_it_was(tmp_path, pos):
    path, _ = old_checkpoint(tmp_path, pos)
    raw = torch.load(path, weights_only=True)
    ckpt = load_checkpoint(path)
    assert ckpt["vitpos_format"] == FORMAT
    assert all(torch.equal(v, raw["state_dict"][k]) for k, v in ckpt["state_dict"].items())


def test_a_newer_format_is_refused_in_one_line(tmp_path):
    path, _ = old_checkpoint(tmp_path, "rope2d")
    ckpt = torch.load(path, weights_only=True)
    torch.save({**ckpt, "vitpos_format": FORMAT + 1}, path)
    with pytest.raises(ConfigError, match="newer vitpos") as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("pos", ["relbias", "cpb", "relbias+peg"])
def test_format2_class_token_bias_checkpoint_computes_what_it_did(tmp_path, pos):
    """Before format 3 a bias scheme padded the class token's rows and columns with 0 and had no
    ``prefix_bias``, and no config had ``pos_lr_scale``: the upgrade restores exactly that."""
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = pos, 32, 2, 2
    cfg.model.class_token, cfg.model.global_pool = True, "token"
    torch.manual_seed(0)
    model = model_from_config(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        for name, p in model.named_parameters():
            if name.endswith("prefix_bias"):
                p.zero_()  # the old padding
    state = {f"model.{k}": v for k, v in model.state_dict().items() if not k.endswith("prefix_bias")}
    old_cfg = cfg.to_dict()
    del old_cfg["optim"]["pos_lr_scale"]
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": old_cfg}, "vitpos_format": 2}, path)
    x = torch.randn(2, 3, 40, 24)
    cfg2, new = model_from_checkpoint(path)
    assert cfg2.optim.pos_lr_scale == 1.0
    with torch.no_grad():
        torch.testing.assert_close(new(x), model(x), rtol=0, atol=0)
    assert load_checkpoint(path)["vitpos_format"] == FORMAT == 6


def test_format3_position_rule_keeps_its_meaning(tmp_path):
    """Before format 4 ``pos_weight_decay`` was AdamW's decay towards zero and the scale held from the first step;
    a run written then keeps that meaning (its resumed optimizer too)."""
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = "learned", 32, 2, 1
    cfg.optim.pos_weight_decay = 0.3
    old_cfg = cfg.to_dict()
    del old_cfg["optim"]["pos_decay_to"], old_cfg["optim"]["pos_lr_warmup_epochs"]
    state = {f"model.{k}": v for k, v in model_from_config(cfg).state_dict().items()}
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": old_cfg}, "vitpos_format": 3}, path)
    upgraded = config_from_checkpoint(load_checkpoint(path))
    assert (upgraded.optim.pos_weight_decay, upgraded.optim.pos_decay_to) == (0.3, "zero")
    assert upgraded.optim.pos_lr_warmup_epochs == 0.0  # the scale from the first step, as then
    assert Config().optim.pos_decay_to == "start"  # what the same number means now
    groups = param_groups(model_from_config(upgraded), 0.05, 1e-3, 30.0, 0.3, upgraded.optim.pos_decay_to)
    assert [g["weight_decay"] for g in groups if g["lr"] == 30e-3] == [0.3]
    assert not any(g.get("decay_to_start") for g in groups)


@pytest.mark.parametrize(("pos", "kwargs", "named"), [
    ("relbias", {}, {"locality": 0.0}), ("relbias", {"locality": 0.5}, {"locality": 0.5}),
    ("relbias+peg", {}, {"relbias": {"locality": 0.0}}), ("rope2d", {}, {})])  # fmt: skip
def test_format4_relbias_keeps_the_start_it_trained_from(tmp_path, pos, kwargs, named):
    """Before format 5 a `relbias` table started from noise alone; an old config that names no ``locality`` gets 0
    (a run that named one keeps it, other schemes are untouched), so rebuilding it gives that start, and a format-5
    config with no ``locality`` means today's default."""
    cfg = Config()
    cfg.model.pos, cfg.model.pos_kwargs, cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth = (
        pos, kwargs, 32, 2, 1)  # fmt: skip
    state = {f"model.{k}": v for k, v in model_from_config(cfg).state_dict().items()}
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": 4}, path)
    upgraded = config_from_checkpoint(load_checkpoint(path))
    assert upgraded.model.pos_kwargs == named
    torch.save({"state_dict": state, "hyper_parameters": {"config": cfg.to_dict()}, "vitpos_format": 5}, path)
    assert config_from_checkpoint(load_checkpoint(path)).model.pos_kwargs == kwargs


@pytest.mark.cli
def test_upgrading_a_checkpoint_does_not_need_the_lightning_module(tmp_path):
    """The upgrade works on the parameters: reading an old checkpoint must not import vitpos.lit (which imports
    vitpos.checkpoint)."""
    path, _ = old_checkpoint(tmp_path, "rope2d", class_token=True)  # format 1: both upgrade steps run
    code = (
        f"import sys, vitpos.checkpoint as c; c.load_checkpoint({str(path)!r}); sys.exit('vitpos.lit' in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], check=True)


def test_each_migration_is_a_pure_function_of_the_dict(tmp_path):
    """A step returns a new dict and leaves the one it was given as it was (weights, moments and config)."""
    from vitpos.migrations import MIGRATIONS, migrate

    path, _ = old_checkpoint(tmp_path, "rope2d", class_token=True)  # format 1: every step has work to do
    ckpt = torch.load(path, weights_only=True)
    before = torch.load(path, weights_only=True)
    out = migrate(ckpt)
    assert out["vitpos_format"] == FORMAT == len(MIGRATIONS) + 1
    assert ckpt.keys() == before.keys() and ckpt["hyper_parameters"] == before["hyper_parameters"]
    assert all(torch.equal(v, before["state_dict"][k]) for k, v in ckpt["state_dict"].items())
    moments = [m for opt in ckpt["optimizer_states"] for m in opt["state"].values()]
    moments_before = [m for opt in before["optimizer_states"] for m in opt["state"].values()]
    assert all(torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in zip(moments, moments_before, strict=True))
    qkv = "model.blocks.0.attn.qkv.weight"
    assert not torch.equal(out["state_dict"][qkv], ckpt["state_dict"][qkv])  # while the result is migrated
