"""EMA of the weights (--ema): kept in the checkpoint, scored in validation and test, loaded by default,
and every scheme's position caches follow the average."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

import vitpos
from vitpos.checkpoint import EMA_PREFIX, load_checkpoint, model_from_checkpoint
from vitpos.config import Config, ConfigError, model_from_config
from vitpos.data import build_datamodule
from vitpos.lit import LitViT
from vitpos.training import main

TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--batch-size", "16", "--train-size", "64",
        "--val-size", "32", "--test-size", "32", "--epochs", "1"]  # fmt: skip
LOSS_ATOL = 1e-5  # the logged val loss against the same loss recomputed here (float32 means over 2 batches)


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ema") / "run"
    assert main(["--pos", "learned", "--out", str(out), "--ema", "0.5", "--lr", "0.01", *TINY]) == 0
    return out


def _val_loss(model, cfg: Config) -> float:
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    dm.setup("validate")
    losses, sizes = [], []
    with torch.no_grad():
        for images, labels in dm.val_dataloader():
            losses.append(float(F.cross_entropy(model(images), labels)))
            sizes.append(labels.shape[0])
    return sum(loss * n for loss, n in zip(losses, sizes)) / sum(sizes)


def test_ema_weights_are_checkpointed_and_differ_from_the_trained_ones(ema_run):
    state = load_checkpoint(ema_run / "checkpoints" / "last.ckpt")["state_dict"]
    ema = {k.removeprefix(EMA_PREFIX): v for k, v in state.items() if k.startswith(EMA_PREFIX)}
    raw = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    assert ema.keys() == raw.keys()
    assert not torch.equal(ema["pos.table"], raw["pos.table"])  # 4 steps at decay 0.5: an average, not a copy


def test_validation_scores_the_ema_and_loading_prefers_it(ema_run):
    ckpt = ema_run / "checkpoints" / "last.ckpt"
    cfg, ema = model_from_checkpoint(ckpt)  # default: the EMA weights, the ones the run scored
    _, raw = model_from_checkpoint(ckpt, weights="raw")
    _, ema_again = model_from_checkpoint(ckpt, weights="ema")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ema(x), ema_again(x), rtol=0, atol=0)
        torch.testing.assert_close(vitpos.load_model(ckpt)(x), ema(x), rtol=0, atol=0)
    logged = json.loads((ema_run / "results.json").read_text())["last_val"]["val/loss"]
    assert logged == pytest.approx(_val_loss(ema, cfg), abs=LOSS_ATOL)
    assert logged != pytest.approx(_val_loss(raw, cfg), abs=LOSS_ATOL)  # negative control: not the raw weights


def test_asking_for_ema_weights_of_a_run_without_them_is_one_line(tmp_path):
    out = tmp_path / "run"
    assert main(["--pos", "none", "--out", str(out), *TINY]) == 0
    with pytest.raises(ConfigError, match="no EMA weights") as e:
        model_from_checkpoint(out / "checkpoints" / "last.ckpt", weights="ema")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_position_caches_follow_the_ema(pos):
    """An EMA model that has served (and cached) a new grid serves the updated average after an update."""
    cfg = Config()
    cfg.model.pos, cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = pos, 32, 2, 4
    cfg.optim.ema = 0.5
    lit = LitViT(cfg.to_dict())
    ema = lit.ema.module.eval()
    x = torch.randn(2, 3, 48, 40)  # a grid other than the training one: resampled / resized / rebuilt, then cached
    with torch.no_grad():
        before = ema(x)
        for p in lit.model.parameters():
            p.add_(0.5 * torch.randn_like(p))  # an optimizer step, in place
        lit.ema.update(lit.model, step=10)
        after = ema(x)
        fresh = model_from_config(cfg).eval()  # nothing cached: built from the averaged state
        fresh.load_state_dict(copy.deepcopy(ema.state_dict()))
        torch.testing.assert_close(after, fresh(x), rtol=0, atol=0)
    assert not torch.allclose(after, before)  # the update changed what the EMA model computes
