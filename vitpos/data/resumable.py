"""The training loader of the map-style sets, resumable mid-epoch.

:class:`ResumableLoader` keeps where it is in the epoch (:class:`EpochPosition`: batches served, and the epoch's
shuffle seed when it drew one); the data module stores that in every checkpoint and hands it back on ``--resume``
(``VitposDataModule.state_dict`` / ``load_state_dict``), so a run resumed from a checkpoint written mid-epoch
(``--ckpt-every-n-steps``) serves the rest of that epoch's batches in the same order, instead of starting the epoch
over. A run that is not resumed mid-epoch draws what torch's ``RandomSampler`` draws.

What is replayed: the order (one process: :class:`EpochSeedSampler`'s seed; under DDP: Lightning's
DistributedSampler, a function of the epoch) and the global RNG state the checkpoint carries
(:class:`vitpos.lit.LitViT`), which creating the resumed iterator leaves untouched. Not replayed: the RNG streams of
loader workers (``num_workers > 0``), which restart with the resumed run, so random augmentations done in workers
differ after a resume.

Why the data module and not Lightning's own restore of a loader's ``state_dict``: Lightning hands that state only to
a loader it builds after the checkpoint is read, and the LR schedule (``estimated_stepping_batches``) builds the loader
and its iterator before that; the data module's state arrives first. Under DDP Lightning rebuilds the loader with its
own sampler from the same arguments, so the position object is shared by every copy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler


@dataclass
class EpochPosition:
    """Where the training loader is in its epoch, and where to resume."""

    batches: int = 0  # served in the current epoch
    seed: int | None = None  # the epoch's shuffle seed (EpochSeedSampler), None for Lightning's DistributedSampler
    resume: dict[str, Any] | None = None  # a checkpoint's position, taken by the next iteration

    def state_dict(self) -> dict[str, int | None]:
        return {"batches": self.batches, "seed": self.seed}


class EpochSeedSampler(RandomSampler):
    """torch's ``RandomSampler`` (the same draw from the global RNG, the same order) that keeps the seed of the epoch
    it serves, and serves a given seed once instead of drawing one (``replay``)."""

    def __init__(self, data_source: Any) -> None:
        super().__init__(data_source)
        self.seed: int | None = None  # the seed of the epoch being served
        self.replay: int | None = None

    def __iter__(self) -> Iterator[int]:
        if self.replay is None:
            self.seed = int(torch.empty((), dtype=torch.int64).random_().item())  # as RandomSampler draws it
        else:
            self.seed, self.replay = self.replay, None
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class _SkipFirst:
    """The batches of ``batches`` less the first ``n``, once. A loader with persistent workers keeps this object for
    every later epoch, which it serves whole."""

    def __init__(self, batches: Iterable[list[Any]], n: int) -> None:
        self.batches, self.n = batches, n

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]  # the epoch's length: Lightning counts the skipped as done

    def __iter__(self) -> Iterator[list[Any]]:
        n, self.n = self.n, 0
        yield from itertools.islice(self.batches, n, None)


class ResumableLoader(DataLoader):
    """A training DataLoader that can start inside an epoch (see the module docstring). ``position`` is shared with
    the data module that built it."""

    def __init__(self, *args: Any, position: EpochPosition | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.position = position if position is not None else EpochPosition()
        self._skip = 0  # batches to pass over when the next iterator is built
        self._iterated = False

    # Lightning checks for these two to tell a resumable loader from one that restarts its epoch (and warns about
    # the latter); its restore comes after the first iterator is built, so a state it hands over is ignored.
    def state_dict(self) -> dict[str, int | None]:
        return self.position.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    @property
    def _index_sampler(self) -> Any:
        batches = super()._index_sampler
        return _SkipFirst(batches, self._skip) if self._skip else batches

    def __iter__(self) -> Iterator[Any]:
        pos = self.position
        resume, pos.resume = pos.resume, None
        # A position is for the first iteration (the resumed epoch); one that comes later is not this epoch's.
        skip = int(resume["batches"]) if resume and not self._iterated else 0
        if not 0 < skip < len(self):  # none, or written at an epoch's end: this epoch starts afresh
            skip = 0
        self._iterated = True
        if skip:
            if isinstance(self.sampler, EpochSeedSampler) and resume.get("seed") is not None:
                self.sampler.replay = int(resume["seed"])
            # Building an iterator draws its workers' base seed from the global RNG; mid-epoch the uninterrupted run
            # drew nothing, and the RNG state restored from the checkpoint must stay as it was.
            rng = torch.get_rng_state()
            self._skip = skip
            iterator = super().__iter__()
            self._skip = 0
            torch.set_rng_state(rng)
        else:
            iterator = super().__iter__()
        pos.batches = skip
        return self._counted(iterator)

    def _counted(self, iterator: Iterator[Any]) -> Iterator[Any]:
        pos = self.position
        for batch in iterator:
            pos.batches += 1
            pos.seed = self.sampler.seed if isinstance(self.sampler, EpochSeedSampler) else None
            yield batch
