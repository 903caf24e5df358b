"""The report of a sweep: ``DIR/resolution.{json,csv,md,png}``, and reading the records back."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_only

from ..errors import ConfigError
from ..outputs import check_creatable, make_dir, read_json, shell
from ..resolution import Resolution, resolution_label
from .sweep import EvalData, _note, sweep

RESULT_FILES = ("resolution.json", "resolution.csv", "resolution.md", "resolution.png")


def run_labels(records: list[dict[str, Any]]) -> dict[str, str]:
    """checkpoint -> 'scheme/stem', with the checkpoint's run folder added where two would clash."""
    by_ckpt = {r["checkpoint"]: f"{r['scheme']}/{r['stem']}" for r in records}
    clash = {lab for lab in by_ckpt.values() if list(by_ckpt.values()).count(lab) > 1}
    labels = {}
    for ckpt, lab in by_ckpt.items():
        if lab in clash:
            p = Path(ckpt)
            run = p.parent.parent.name if p.parent.name == "checkpoints" else p.parent.name
            lab = f"{lab} ({run}/{p.stem})"
        labels[ckpt] = lab
    return labels


def _sorted_resolutions(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    hws = {(r["height"], r["width"]) for r in records}
    return sorted(hws, key=lambda hw: (hw[0] * hw[1], hw[0] != hw[1], hw))


def markdown_table(records: list[dict[str, Any]]) -> str:
    """Rows run x method, columns resolutions; top-1 in %, bold at the row's training resolution."""
    labels = run_labels(records)
    cols = _sorted_resolutions(records)
    trains = {r["train_resolution"] for r in records}

    def head(hw: tuple[int, int]) -> str:
        lab = resolution_label(hw)
        return f"{lab} (train)" if hw[0] == hw[1] and hw[0] in trains else lab

    rows: dict[tuple[str, str], dict] = {}
    for r in records:
        key = (r["checkpoint"], r["method"])
        rows.setdefault(key, {"label": labels[r["checkpoint"]], "method": r["method"], "train": r["train_resolution"]})
        rows[key][(r["height"], r["width"])] = r["top1"]
    lines = [
        "| scheme/stem | method | " + " | ".join(head(c) for c in cols) + " |",
        "|---|---|" + "---:|" * len(cols),
    ]
    for row in rows.values():
        cells = []
        for c in cols:
            v = row.get(c)
            text = "" if v is None else f"{100 * v:.1f}"
            cells.append(f"**{text}**" if text and c == (row["train"], row["train"]) else text)
        lines.append(f"| {row['label']} | {row['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], ax=None):
    """Top-1 vs resolution, one line per run x method, a dashed vertical line at each training resolution.

    The y axis runs from 0 to 100 % with chance (1 / classes, when the records carry it) drawn as a
    dotted line. The x axis is the side of the equal-area square, sqrt(H*W), so non-square
    resolutions have a place. Colour tells the run, line style and marker the method; markers are
    hollow and lines drawn first are wider, so methods that coincide stay visible under each other.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.8))
    labels = run_labels(records)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 2))]
    markers = ["o", "s", "^", "D", "v", "P"]
    for i, ckpt in enumerate(labels):
        mine = [r for r in records if r["checkpoint"] == ckpt]
        methods = list(dict.fromkeys(r["method"] for r in mine))
        for j, m in enumerate(methods):
            pts = sorted((r for r in mine if r["method"] == m), key=lambda r: r["height"] * r["width"])
            x = [(r["height"] * r["width"]) ** 0.5 for r in pts]
            y = [100 * r["top1"] for r in pts]
            ax.plot(x, y, color=colours[i % len(colours)], linestyle=styles[j % len(styles)],
                    linewidth=max(0.8, 2.4 - 0.5 * j), marker=markers[j % len(markers)],
                    markersize=max(3.0, 7.0 - 1.3 * j), markerfacecolor="none",
                    label=f"{labels[ckpt]} · {m}")  # fmt: skip
    chances = sorted({100 / r["num_classes"] for r in records if r.get("num_classes")})
    for c in chances:
        ax.axhline(c, color="0.35", linestyle=":", linewidth=1.2, label=f"chance ({c:.3g} %)")
    for t in sorted({r["train_resolution"] for r in records}):
        ax.axvline(t, color="0.4", linestyle="--", linewidth=1)
        ax.annotate(f"train {t}", (t, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="0.3")  # fmt: skip
    cols = _sorted_resolutions(records)
    ax.set_xticks([(h * w) ** 0.5 for h, w in cols], [resolution_label(hw) for hw in cols])
    ax.set_ylim(0, 100)
    ax.set_xlabel("test resolution (px)")
    ax.set_ylabel("top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(ax.lines) > 8 else 1, loc="best")
    return ax


def write_results(records: list[dict[str, Any]], out_dir: str | Path) -> Path:
    """DIR/resolution.json, .csv, .md (markdown table) and .png (plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = make_dir(out_dir)
    (out / "resolution.json").write_text(json.dumps(records, indent=2) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    (out / "resolution.csv").write_text(buf.getvalue())
    first = records[0]
    split_note = f"{first['data']} {first['split']} split"
    (out / "resolution.md").write_text(
        f"# Resolution transfer: top-1 (%) on {split_note}\n\n"
        "Bold: the row's training resolution. Samples per cell: "
        f"{', '.join(sorted({str(r['samples']) for r in records}))}.\n\n" + markdown_table(records)
    )
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot(records, ax)
    ax.set_title(f"Resolution transfer ({split_note})")
    fig.tight_layout()
    fig.savefig(out / "resolution.png", dpi=120)
    plt.close(fig)
    return out


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Read an evaluator's resolution.json (or the folder holding it), or the records of a benchmark's
    JSON that keeps them under "records" (docs/study.json)."""
    p = Path(path)
    if p.is_dir():
        p = p / "resolution.json"
    data = json.loads(p.read_text())
    return data["records"] if isinstance(data, dict) else data


def default_out(ckpt: str | Path, kind: str = "resolution") -> Path:
    """Where a result on ``ckpt`` goes by default: beside the run it belongs to.

    ``RUN/<kind>/`` for a run's ``checkpoints/last.ckpt`` (where ``train.py --eval-resolutions``
    writes its sweep), ``RUN/<kind>-<stem>/`` for the run's other checkpoints, and
    ``<folder>/<stem>-<kind>/`` for a checkpoint outside a run folder.
    """
    p = Path(ckpt)
    if p.parent.name == "checkpoints":
        run = p.parent.parent
        return run / kind if p.stem == "last" else run / f"{kind}-{p.stem}"
    return p.parent / f"{p.stem}-{kind}"


def check_out(out_dir: str | Path, overwrite: bool) -> None:
    """``out_dir`` can hold a new result: an earlier one is an error unless ``overwrite``, and result files that
    vitpos.evaluate did not write always are (``overwrite`` replaces only its own)."""
    check_creatable(out_dir)
    existing = [f for f in RESULT_FILES if (Path(out_dir) / f).exists()]
    if existing and not overwrite:
        raise ConfigError(
            f"{out_dir} already holds a resolution result ({existing[0]}); pass --overwrite or another --out"
        )
    if existing and not _is_result(Path(out_dir) / "resolution.json"):
        raise ConfigError(
            f"{out_dir} holds {existing[0]}, which vitpos.evaluate did not write (no readable resolution.json of its "
            "own); --overwrite replaces only its results: choose another --out"
        )


def _is_result(path: Path) -> bool:
    """``path`` is a resolution.json vitpos.evaluate wrote: a list of records with a checkpoint and a top-1."""
    records = read_json(path)
    return isinstance(records, list) and all(isinstance(r, dict) and {"checkpoint", "top1"} <= set(r) for r in records)


def sweep_and_write(
    ckpt_paths: Sequence[str | Path],
    resolutions: Sequence[Resolution | str],
    out_dir: str | Path | None = None,
    trainer_kwargs: dict[str, Any] | None = None,
    *,
    methods: Sequence[str] | None = None,
    data: EvalData | None = None,
    overwrite: bool = False,
    init_from: Sequence[str] = (),
    init_arch: str | None = None,
) -> list[dict[str, Any]]:
    """Sweep and write the reports (rank 0); returns the records on every rank."""
    if out_dir is not None:
        out = Path(out_dir)
    elif ckpt_paths:
        out = default_out(ckpt_paths[0])
    else:  # a pretrained model has no run folder: runs/<its name>-resolution
        out = Path("runs") / f"{re.sub(r'[^A-Za-z0-9._-]+', '-', Path(init_from[0]).stem)}-resolution"
    if rank_zero_only.rank == 0:
        check_out(out, overwrite)
    records = sweep(ckpt_paths, resolutions, methods=methods, data=data, trainer_kwargs=trainer_kwargs,
                    init_from=init_from, init_arch=init_arch)  # fmt: skip
    if rank_zero_only.rank == 0:
        write_results(records, out)
        _note(f"{len(records)} results in {shell(out)}/resolution.{{json,csv,md,png}}")
    return records
