"""Resolution transfer: evaluate trained checkpoints at other resolutions, with every way each
position scheme offers to serve a grid it was not trained on.

    python -m vitpos.evaluate --ckpt runs/a/checkpoints/last.ckpt runs/b/checkpoints/last.ckpt \\
        --resolutions 24 32 48 64 32x64

``sweep.py`` scores every checkpoint x method x resolution (exact under DDP), ``report.py`` writes
``DIR/resolution.{json,csv,md,png}`` (rank 0 only) and reads them back, ``__main__.py`` is the command.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..resolution import parse_resolution, to_hw
from .report import (
    RESULT_FILES,
    check_out,
    default_out,
    load_records,
    markdown_table,
    plot,
    run_labels,
    sweep_and_write,
    write_results,
)
from .sweep import (
    EvalData,
    TransferEval,
    _eval_config,
    evaluate_model,
    make_trainer,
    pretrained_config,
    sweep,
)

__all__ = [
    "RESULT_FILES", "ConfigError", "EvalData", "TransferEval", "_eval_config", "build_parser",
    "check_out", "default_out", "evaluate_model", "load_records", "main", "make_trainer", "markdown_table",
    "parse_resolution", "plot", "pretrained_config", "run_labels", "sweep", "sweep_and_write", "to_hw",
    "write_results",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    # The command is imported on first use: `python -m vitpos.evaluate` runs __main__.py itself, and importing it
    # here as well would load it twice (runpy warns).
    if name in ("main", "build_parser"):
        from . import __main__ as command

        return getattr(command, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
