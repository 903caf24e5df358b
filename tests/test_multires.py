"""Multi-resolution training (``--train-resolutions``): one resolution per batch, the same on every rank."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DistributedSampler

from vitpos import evaluate as ev
from vitpos.config import DataConfig
from vitpos.data import build_datamodule
from vitpos.data.base import MultiResBatchSampler, batch_resolution
from vitpos.lit import LitViT
from vitpos.rundir import OUT_ENV
from vitpos.training import main

RES = [16, 24, 32]
TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--batch-size", "16", "--train-size", "64",
        "--val-size", "32", "--test-size", "32", "--epochs", "1"]  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _datamodule(name: str = "shapes", seed: int = 0, train_size: int = 64, batch_size: int = 8):
    cfg = DataConfig(name=name, train_size=train_size, val_size=8, test_size=8, batch_size=batch_size)
    dm = build_datamodule(cfg, img_size=32, seed=seed)
    dm.train_resolutions = list(RES)
    dm.setup("fit")
    return dm


def _sizes(loader) -> list[int]:
    out = []
    for images, labels in loader:
        assert images.shape[-2] == images.shape[-1]  # one resolution per batch (a stacked tensor)
        assert images.shape[0] == labels.shape[0]
        out.append(images.shape[-1])
    return out


def _resolutions(sampler: DistributedSampler, batch_size: int = 4, seed: int = 0, epoch: int = 0) -> list[int]:
    sampler.set_epoch(epoch)
    batches = MultiResBatchSampler(sampler, batch_size, drop_last=True, resolutions=RES, seed=seed)
    seq = []
    for batch in batches:
        assert len({r for _, r in batch}) == 1
        seq.append(batch[0][1])
    return seq


def test_batches_come_at_several_resolutions_one_per_batch():
    dm = _datamodule()
    sizes = _sizes(dm.train_dataloader())
    assert len(sizes) == 8 and set(sizes) <= set(RES) and len(set(sizes)) > 1
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape[-2:] == (32, 32)  # validation stays at img_size


def test_shapes_batches_are_rendered_natively_not_resized():
    dm = _datamodule()
    images, labels = next(iter(dm.train_dataloader()))
    r = images.shape[-1]
    native = dm.eval_dataset(r, "train")  # the same scenes, rendered at r without augmentation
    first = [native[int(i)] for i in range(len(native))]
    assert any(torch.equal(images[0], x) and int(labels[0]) == y for x, y in first)


def test_ranks_draw_the_same_resolutions_and_the_seed_changes_them():
    ds = list(range(64))
    rank0 = _resolutions(DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True))
    rank1 = _resolutions(DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True))
    alone = _resolutions(DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True))
    assert rank0 == rank1 == alone[: len(rank0)] and len(set(rank0)) > 1
    other_seed = _resolutions(DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True), seed=1)
    assert other_seed != rank0
    next_epoch = _resolutions(DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True), epoch=1)
    assert next_epoch != rank0
    # a pure function: no global RNG involved
    torch.manual_seed(123)
    assert [batch_resolution(RES, 0, 0, b) for b in range(len(rank0))] == rank0


def test_each_rank_takes_its_part_at_the_same_resolutions():
    """Under DDP the data module gives each rank's training loader its own part of the epoch (the Trainer adds no
    sampler of its own), every rank at the same resolution batch by batch."""
    per_rank, seen = [], []
    for rank in (0, 1):
        dm = _datamodule()
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        loader = dm.train_dataloader()
        assert (
            isinstance(loader.batch_sampler.sampler, DistributedSampler) and loader.batch_sampler.sampler.rank == rank
        )
        per_rank.append(_sizes(loader))
        seen.append({i for batch in loader.batch_sampler for i, _ in batch})
    assert per_rank[0] == per_rank[1] and len(set(per_rank[0])) > 1
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 64  # every image once, on one rank


def test_non_native_data_is_resized_per_batch():
    dm = _datamodule("digits", batch_size=16)
    assert dm.train_dataset_at((32, 32)) is None
    sizes = _sizes(dm.train_dataloader())
    assert set(sizes) <= set(RES) and len(set(sizes)) > 1


def _train(tmp_path: Path, *extra: str) -> int:
    saved = os.environ.pop(OUT_ENV, None)
    try:
        return main([*TINY, "--out", str(tmp_path / "run"), "--train-resolutions", *map(str, RES), *extra])
    finally:
        os.environ.pop(OUT_ENV, None)
        if saved is not None:
            os.environ[OUT_ENV] = saved


@pytest.mark.parametrize("extra", [("--pos", "learned"), ("--pos", "rope2d", "--data", "digits")])
def test_a_tiny_multi_resolution_run_finishes(tmp_path, monkeypatch, extra):
    seen = {"train": [], "val": []}
    train_step, val_step = LitViT.training_step, LitViT.validation_step

    def record_train(self, batch, batch_idx):
        seen["train"].append(batch[0].shape[-1])
        return train_step(self, batch, batch_idx)

    def record_val(self, batch, batch_idx):
        seen["val"].append(batch[0].shape[-1])
        return val_step(self, batch, batch_idx)

    monkeypatch.setattr(LitViT, "training_step", record_train)
    monkeypatch.setattr(LitViT, "validation_step", record_val)
    assert _train(tmp_path, *extra) == 0
    assert set(seen["train"]) <= set(RES) and len(set(seen["train"])) > 1
    assert set(seen["val"]) == {32}
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "run" / "results.json").is_file()
    # The evaluator's records say which resolutions the model was trained at.
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    records = ev.sweep([ckpt], [32], data=ev.EvalData(limit=4))
    assert {(r["train_resolution"], tuple(r["train_resolutions"])) for r in records} == {(32, tuple(RES))}
