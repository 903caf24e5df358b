"""Every sample once per epoch from LitData, on any number of ranks, for any sample count.

LitData gives each rank ``floor(floor(N / B) / W)`` full batches of B (drop_last, forced under DDP so that every rank
takes the same number of steps) and leaves the rest out of the epoch: fewer than ``B x W`` samples, the tail of the
epoch's shuffled order. :class:`EveryOnceLoader` serves that rest as one more batch on every rank:

* rank r takes ``rest[r::W]`` and pads it to B with copies of samples of ``rest``; every rank then has the same
  number of batches, all of B (so timm's Mixup and ``torch.compile`` see one batch shape);
* each batch is ``(images, labels, weights)``. The weight is 1 in a full batch; in the last one it is 0 for a
  padding copy and ``B x W / len(rest)`` for a real sample, so that with the per-rank loss ``sum(weight x loss) / B``
  DDP's gradient average equals the gradient of the mean loss over the real samples of that step, on every rank
  count, without a collective. Metrics count only samples of weight > 0.

The rest is computed from LitData's own plan for the epoch (``vitpos.compat.litdata.epoch_plan``, the same call each
of its workers makes): every index that no rank or worker is given. The last batch is read by
index in the main process (at most B images once per epoch), with augmentations drawn from a generator seeded by
(seed, epoch, rank) so that the main process's random state is left as it was.

The loader's state (LitData's, plus whether the last batch was served) goes into the checkpoint, so a run killed
between the last full batch and the extra one serves the extra one after ``--resume``. Exactly once holds when a run
resumes on the same ranks, workers and batch size; LitData re-plans an epoch resumed on another layout ("elastic"
resume) and the rest computed here would not match its plan.

Multi-node: LitData's multi-node plan (epochs after the first keep each node on the chunks it read in the first) gives
a chunk shared by two nodes to both, so some samples are seen twice and ranks get unequal counts; the dataset passed
here must be told it runs on one node (``force_single_node_plan``), which plans every epoch globally.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from litdata import StreamingDataLoader, StreamingDataset

from ..compat.litdata import epoch_plan, sample_count

STATE_KEY = "vitpos_rest_served"


def rest_of_epoch(dataset: StreamingDataset, num_workers: int, batch_size: int, epoch: int) -> list[int]:
    """The indices LitData's plan for ``epoch`` gives to no rank and no worker, in a fixed shuffled order."""
    served = np.zeros(sample_count(dataset, num_workers, batch_size), dtype=bool)
    for intervals in epoch_plan(dataset, num_workers, batch_size, epoch):
        for iv in intervals:
            served[int(iv[1]) : int(iv[2])] = True
    rest = np.flatnonzero(~served)
    return [int(i) for i in np.random.RandomState([dataset.seed, epoch]).permutation(rest)]


class EveryOnceLoader(StreamingDataLoader):
    """A StreamingDataLoader whose epoch holds every sample once: LitData's full batches, then the rest.

    ``read(index)`` returns the training item ``(image tensor, label)`` of sample ``index`` (random access, in this
    process); it runs with torch's and Python's random state seeded by (seed, epoch, rank)."""

    def __init__(
        self, dataset: StreamingDataset, read: Callable[[int], tuple[torch.Tensor, int]], *, batch_size: int, **kw: Any
    ) -> None:
        super().__init__(dataset, batch_size=batch_size, drop_last=True, **kw)
        self.read = read
        self._rest_served = False
        self._rest_pending = False  # restored from a checkpoint written between the last full batch and the rest

    def _rest_size(self) -> int:
        n = sample_count(self.dataset, self.num_workers, self.batch_size)
        return n - self.dataset.distributed_env.world_size * self.dataset.get_len(self.num_workers, self.batch_size)

    def __len__(self) -> int:
        return super().__len__() + (1 if self._rest_size() > 0 else 0)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        if not self._rest_pending:
            self._rest_served = False
            for images, labels in super().__iter__():
                yield images, labels, torch.ones(labels.shape[0])
        self._rest_pending = False
        batch = self._rest_batch(self.current_epoch)
        if batch is not None:
            self._rest_served = True  # before the yield: a checkpoint written after this step must say so
            yield batch

    def _rest_batch(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        rest = rest_of_epoch(self.dataset, self.num_workers, self.batch_size, epoch)
        if not rest:
            return None
        env, b = self.dataset.distributed_env, self.batch_size
        mine = rest[env.global_rank :: env.world_size]
        pad = [rest[k % len(rest)] for k in range(b - len(mine))]
        weights = torch.tensor([b * env.world_size / len(rest)] * len(mine) + [0.0] * len(pad))
        with torch.random.fork_rng(devices=[]):
            state = random.getstate()
            key = (self.dataset.seed * 1_000_003 + epoch) * 1_000_003 + env.global_rank
            torch.manual_seed(key % (2**63 - 1))
            random.seed(key)
            items = [self.read(i) for i in mine + pad]
            random.setstate(state)
        images = torch.stack([x for x, _ in items])  # (B, C, H, W)
        labels = torch.tensor([int(y) for _, y in items])
        return images, labels, weights

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), STATE_KEY: self._rest_served}

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        super().load_state_dict(obj)
        # LitData restores a loader stopped inside its own part of the epoch (self.restore); stopped after it, the
        # next iteration serves only the rest, unless that was served too (then a new epoch begins, as in LitData).
        done = obj["num_samples_yielded"] >= self.dataset.get_len(self.num_workers, self.batch_size)
        self._rest_served = bool(obj.get(STATE_KEY, False))
        self._rest_pending = done and not self._rest_served and self._rest_size() > 0
