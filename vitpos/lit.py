"""The LightningModule: model, loss, metrics and optimisation. Data lives in vitpos.data."""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.utils import ModelEmaV3
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from .checkpoint import FORMAT
from .config import Config, model_from_config
from .model import ViT
from .optim import AdamW, lr_lambdas, param_groups


class LitViT(L.LightningModule):
    """Trains a vitpos ViT. ``config`` is the resolved :class:`Config` as a plain dict (saved in checkpoints)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        self.save_hyperparameters({"config": config})
        self.cfg = Config.from_dict(config)
        self.model = model_from_config(self.cfg)
        n = self.cfg.model.num_classes
        d, o = self.cfg.data, self.cfg.optim
        self.mixup = (
            Mixup(mixup_alpha=d.mixup, cutmix_alpha=d.cutmix, label_smoothing=o.label_smoothing, num_classes=n)
            if d.mixup > 0 or d.cutmix > 0
            else None
        )
        # One metric object per stage and k, so states never mix between stages.
        ks = [1, 5] if n > 5 else [1]
        self.metrics = nn.ModuleDict(
            {
                f"{stage}_top{k}": MulticlassAccuracy(num_classes=n, top_k=k, average="micro")
                for stage in ("train", "val", "test")
                for k in ks
            }
        )
        self._ks = ks
        # --ema: a moving average of the weights (timm's ModelEmaV3: parameters and buffers), updated after
        # every optimizer step, scored in validation and test, and saved in checkpoints as ema.module.*.
        # Its position caches stay correct: a cached entry is keyed on its parameters' versions, which
        # each in-place EMA update bumps, and every train/eval switch clears them.
        self.ema: ModelEmaV3 | None = None
        if o.ema > 0:
            self.ema = ModelEmaV3(self.model, decay=o.ema)
            self.ema.requires_grad_(False)  # never optimised (and DDP must not wait for its gradients)
            self.ema.train(self.training)  # Lightning switches train/eval for the whole module; start in step

    def forward(self, images: Tensor) -> Tensor:
        return self.model(images)

    def eval_model(self) -> ViT:
        """The weights validation and test score: the EMA when kept, else the trained ones."""
        return self.ema.module if self.ema is not None else self.model

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # The EMA follows each step here, not in on_train_batch_end: a checkpoint written every N steps is written in
        # the callbacks' on_train_batch_end, before the module's, and would hold an average one update short.
        if self.ema is not None:
            self.ema.update(self.model, step=self.global_step)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # How the position scheme's own parameters move, whatever the scheme: the rms of their values and of their
        # gradients (all together; unclipped, unscaled). A table that stays near its init std has not learned
        # (docs/pos_dynamics.md). Lightning writes them every --log-every-n-steps with the other step metrics; a
        # scheme without parameters logs nothing.
        params = [p for p in self.model.pos.parameters() if p.grad is not None]
        if params:
            with torch.no_grad():
                values = torch.cat([p.detach().flatten() for p in params]).float()
                grads = torch.cat([p.grad.flatten() for p in params]).float()
            self.log("pos/rms", values.pow(2).mean().sqrt(), on_step=True, on_epoch=False)
            self.log("pos/grad_rms", grads.pow(2).mean().sqrt(), on_step=True, on_epoch=False)

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        # (images, labels) or (images, labels, weights): streamed shards pad their last batch with weight-0 copies
        # and weight its real samples so that the loss is their mean across ranks (vitpos.data.streaming)
        images, labels, *rest = batch
        weights = rest[0] if rest else None
        if self.mixup is not None and images.shape[0] % 2 == 0:  # timm's Mixup needs an even batch
            images, soft = self.mixup(images, labels)
            logits = self(images)
            losses = -(soft * logits.log_softmax(dim=-1)).sum(dim=-1)  # timm's SoftTargetCrossEntropy, per sample
        else:
            logits = self(images)
            losses = F.cross_entropy(logits, labels, label_smoothing=self.cfg.optim.label_smoothing, reduction="none")
        loss = losses.mean() if weights is None else (losses * weights).sum() / losses.shape[0]
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item()}) at step {self.global_step}; "
                "lower --lr or check the data; the last good checkpoint is kept"
            )
        if weights is not None:  # metrics count real samples only
            logits, labels = logits[weights > 0], labels[weights > 0]
        self._update("train", logits, labels)
        # sync_dist: under DDP the logged loss is the mean over the ranks, not rank 0's alone (one scalar
        # all-reduce per step)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=images.shape[0],
                 sync_dist=True)  # fmt: skip
        return loss

    def _eval_step(self, stage: str, batch: tuple[Tensor, Tensor]) -> None:
        images, labels = batch
        logits = self.eval_model()(images)
        loss = F.cross_entropy(logits, labels)
        self._update(stage, logits, labels)
        self.log(f"{stage}/loss", loss, prog_bar=stage == "val", sync_dist=True, batch_size=images.shape[0])

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def _update(self, stage: str, logits: Tensor, labels: Tensor) -> None:
        for k in self._ks:
            metric = self.metrics[f"{stage}_top{k}"]
            metric.update(logits.detach(), labels)
            # Logging the metric object lets torchmetrics sync its sums across ranks at epoch end.
            self.log(f"{stage}/top{k}", metric, on_step=False, on_epoch=True, prog_bar=(k == 1 and stage != "train"))

    def configure_optimizers(self):
        o = self.cfg.optim
        lr = o.lr
        if o.lr_scaling == "linear":
            lr = lr * self.global_batch_size() / 256
        groups = param_groups(self.model, o.weight_decay, lr, o.pos_lr_scale, o.pos_weight_decay, o.pos_decay_to)
        opt = AdamW(groups, lr=lr, betas=tuple(o.betas))
        total = max(1, int(self.trainer.estimated_stepping_batches))
        steps_per_epoch = max(1, total // max(1, self.trainer.max_epochs or 1))
        warmup = min(total, max(1, int(o.warmup_epochs * steps_per_epoch)))
        ramp = int(o.pos_lr_warmup_epochs * steps_per_epoch)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambdas(groups, warmup, total, o.min_lr_ratio, ramp))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # RNG states travel in the checkpoint as plain tensors (safe to load with weights_only=True),
    # so a resumed run draws the same shuffles and augmentations as an uninterrupted one.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["vitpos_format"] = FORMAT
        version, state, gauss = random.getstate()
        np_state = np.random.get_state()
        checkpoint["rng"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": {"version": version, "state": torch.tensor(state, dtype=torch.int64), "gauss": gauss},
            "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                      "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        }  # fmt: skip

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng = checkpoint.get("rng")
        if not rng:
            return
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(rng["cuda"])
        py = rng["python"]
        random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
        n = rng["numpy"]
        np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))

    def global_batch_size(self) -> int:
        """Per-device batch x devices x nodes: the batch one optimizer step sees."""
        try:
            world = self.trainer.world_size
        except RuntimeError:  # not attached to a Trainer
            world = 1
        return self.cfg.data.batch_size * world
