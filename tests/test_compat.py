"""The contracts of vitpos.compat: every private name of a library vitpos uses still exists in the installed version.

These run first (conftest.py): an upgrade that removes or renames one fails here, naming it and the module of
vitpos.compat that needs updating, before it fails somewhere inside a training run."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest

from vitpos.compat import lightning, litdata, timm, torch, torchvision

MODULES = [lightning, litdata, timm, torch, torchvision]


def _trainer() -> Any:
    import lightning as L

    return L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def resolve(owner: str) -> Any:
    """``owner`` as an object: an import path (a module, or an attribute of one), or ``trainer.PATH`` of a Trainer."""
    if owner.startswith("trainer."):
        obj = _trainer()
        for part in owner.split(".")[1:]:
            obj = getattr(obj, part)
        return obj
    parts = owner.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ModuleNotFoundError(owner)


def defines(obj: Any, name: str) -> bool:
    """``obj`` has ``name``, or (a class) declares it as a field or assigns ``self.name`` in its code."""
    if hasattr(obj, name):
        return True
    if not inspect.isclass(obj):
        return False
    for cls in obj.__mro__[:-1]:
        if name in getattr(cls, "__dataclass_fields__", {}) or name in getattr(cls, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        if re.search(rf"self\.{re.escape(name)}\s*(:[^=\n]*)?=", source):
            return True
    return False


CONTRACT = [(module, owner, name) for module in MODULES for owner, name in module.PRIVATE]


IDS = [f"{m.__name__.rsplit('.', 1)[1]}:{o.rsplit('.', 1)[-1]}.{n}" for m, o, n in CONTRACT]


@pytest.mark.parametrize(("module", "owner", "name"), CONTRACT, ids=IDS)
def test_the_private_names_vitpos_uses_exist(module, owner, name):
    where = module.__name__.replace(".", "/") + ".py"
    try:
        obj = resolve(owner)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{owner} is gone from the installed library ({e}); {where} needs updating")
    assert defines(obj, name), f"{owner} no longer has {name}; {where} needs updating"


def test_a_missing_name_is_reported():
    """The check itself: a name the library does not have fails it."""
    assert not defines(resolve("lightning.pytorch.loggers.csv_logs.ExperimentWriter"), "_no_such_method")
    assert defines(resolve("lightning.pytorch.loggers.CSVLogger"), "_experiment")  # an instance attribute
    with pytest.raises(ModuleNotFoundError):
        resolve("no_such_library.Thing")


def test_lightning_restores_no_loader_state_that_a_schedule_set_up_first(tmp_path):
    """Why the data module hands a checkpoint's loader state over itself (vitpos.data.resumable): the LR schedule's
    step count (``estimated_stepping_batches``) sets up the training loader before Lightning reads the fit loop's
    state, so Lightning's own restore of a stateful loader never reaches it and a resumed epoch starts over. When a
    Lightning release changes that, this fails, and its own restore could take over."""
    import lightning as L
    import torch as T
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torchdata.stateful_dataloader import StatefulDataLoader

    seen: list[int] = []

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = T.nn.Parameter(T.zeros(1))

        def training_step(self, batch: T.Tensor, batch_idx: int) -> T.Tensor:
            seen.append(int(batch[0]))
            return (self.w - batch.float().mean()).square()

        def configure_optimizers(self) -> Any:
            steps = self.trainer.estimated_stepping_batches  # what LitViT's schedule asks for
            opt = T.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": T.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / steps)}

    def fit(ckpt_path: Any = None) -> None:
        every_3 = ModelCheckpoint(tmp_path, "mid", every_n_train_steps=3, save_top_k=-1)
        trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=tmp_path, callbacks=[every_3])  # fmt: skip
        trainer.fit(Module(), StatefulDataLoader(T.arange(16), batch_size=2), ckpt_path=ckpt_path)

    fit()
    seen.clear()
    fit(tmp_path / "mid.ckpt")  # written inside the epoch
    assert seen[0] == 0, "Lightning now restores the loader state itself: the resumed epoch went on"
