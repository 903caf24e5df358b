"""The training loader of the map-style sets, resumable inside an epoch: torchdata's ``StatefulDataLoader``.

The loader's state (its sampler's, and how many batches it served) goes into every checkpoint written inside an
epoch, through the data module's ``state_dict``; on ``--resume`` the data module hands it to the loader it builds
(``VitposDataModule.load_state_dict``), so a run resumed from a checkpoint written mid-epoch
(``--ckpt-every-n-steps``) serves the rest of that epoch's batches in the same order instead of starting the epoch
over. A checkpoint written at an epoch's end holds no loader state: the next epoch starts afresh.

The order: one process draws torch's ``RandomSampler`` order (:class:`EpochSeedSampler`: a seed drawn from the global
RNG each epoch, which its state keeps); under DDP each rank takes its part of a shuffle that is a function of (seed,
epoch), torchdata's ``StatefulDistributedSampler``. The global RNG state the checkpoint carries
(:class:`vitpos.lit.LitViT`) is left as restored by the resumed iterator (:class:`ResumableLoader`). Not replayed:
the RNG streams of loader workers (``num_workers > 0``), which restart with the resumed run, so random augmentations
done in workers differ after a resume.

Why the data module hands the state over and not Lightning, which also stores a stateful loader's state (under its
fit loop): Lightning restores it only into a loader it sets up after reading the loops' state, and the LR schedule
(``estimated_stepping_batches`` in ``configure_optimizers``) sets up the loader and its first iterator before that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

__all__ = ["EpochSeedSampler", "ResumableLoader", "StatefulDistributedSampler"]


class EpochSeedSampler(Sampler[int]):
    """torch's ``RandomSampler`` (the same draw from the global RNG, the same order) whose state, the epoch's seed and
    how many indices it served, resumes the epoch where it stopped."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source
        self.seed: int | None = None  # the seed of the epoch being served
        self.served = 0
        self.resume: tuple[int, int] | None = None  # (seed, served) for the next iteration

    def __len__(self) -> int:
        return len(self.data_source)

    def __iter__(self) -> Iterator[int]:
        if self.resume is None:
            self.seed, start = int(torch.empty((), dtype=torch.int64).random_().item()), 0  # as RandomSampler draws it
        else:
            (self.seed, start), self.resume = self.resume, None
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        order = torch.randperm(len(self.data_source), generator=generator).tolist()
        self.served = start
        for index in order[start:]:
            self.served += 1
            yield index

    def state_dict(self) -> dict[str, int | None]:
        return {"seed": self.seed, "served": self.served}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.resume = None if state.get("seed") is None else (int(state["seed"]), int(state["served"]))


class ResumableLoader(StatefulDataLoader):
    """A ``StatefulDataLoader`` whose iterator, when it resumes a state, draws nothing from the global RNG.

    Building an iterator draws its workers' base seed; the uninterrupted run drew it when the epoch began, before
    the checkpoint, so a resumed run that drew again would shift every later random draw."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resuming = False

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.resuming = True

    def __iter__(self) -> Iterator[Any]:
        if not self.resuming:
            return super().__iter__()
        self.resuming = False
        with torch.random.fork_rng(devices=[]):
            return super().__iter__()
