"""python -m benchmarks.pages [DIR]: every page whose JSON is in docs/ (or DIR); for docs/ also the README's summary
table and the catalogue of pages, docs/benchmarks.md."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.pages import (
    augmentation,
    catalogue,
    claims,
    data,
    diagnostics,
    export,
    frontier,
    gpu,
    logn,
    multires,
    performance,
    performance_compile,
    pos_dynamics,
    protocol,
    real_data,
    summary,
)
from benchmarks.pages.common import DOCS, read

README = DOCS.parent / "README.md"
START, END = "<!-- summary table: python -m benchmarks.pages -->", "<!-- end of summary table -->"
# docs/<name>.md from docs/<name>.json and the folder the record is in (other records and the figures are there too)
PAGES: dict[str, Callable[[dict, Path], str]] = {
    "performance": performance.render,
    "performance_compile": performance_compile.render,
    "export": export.render,
    "data": data.render,
    "diagnostics": diagnostics.render,
    "pos_dynamics": pos_dynamics.render,
    "gpu": gpu.render,
}


def readme_with(block: str, text: str) -> str:
    """The README's text with the block between the markers replaced (the markers must be there, once each)."""
    if text.count(START) != 1 or text.count(END) != 1:
        raise SystemExit(f"README.md needs the markers {START} and {END} once each")
    before, rest = text.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{block}\n{END}{after}"


def summary_page(folder: Path, study: dict, figure_folder: Path | None = None) -> tuple[str, str]:
    """docs/summary.md and the README's table block from docs/study.json and the records beside it in ``folder``; the
    figure goes to ``figure_folder`` (default: ``folder``)."""
    proto = read(folder / "protocol.json")
    return summary.render(
        study,
        figure_folder or folder,
        earlier=read(folder / "rules.json"),
        cost=read(folder / "cost.json"),
        fmnist=read(folder / "fashion_mnist_study.json"),
        reran=read(folder / "rerun.json"),
        others=read(folder / "others.json"),
        chosen=proto["top_others"]["chosen"] if proto else [],
        claimed=read(folder / "claims.json"),
        remade={f"docs/{n}.json": read(folder / f"{n}.json") for n in ("multires", "multires_no16")},
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0]) if argv else DOCS
    for name, render in PAGES.items():
        record = read(folder / f"{name}.json")
        if record is not None:  # a page without its JSON is left as it is
            (folder / f"{name}.md").write_text(render(record, folder))
            print(f"wrote {folder / name}.md")
    study = read(folder / "study.json")
    proto = read(folder / "protocol.json")
    front = read(folder / "frontier.json")
    if proto is not None:
        studies = {name: read(folder / f"{name}.json") for name in protocol.METHOD_RECORDS}
        (folder / "protocol.md").write_text(protocol.render(proto, studies))
        print(f"wrote {folder / 'protocol.md'}")
    if front is not None:
        fmnist = read(folder / "fashion_mnist_study.json")
        (folder / "frontier.md").write_text(frontier.render(front, folder, study, read(folder / "cost.json"), fmnist))
        print(f"wrote {folder / 'frontier.md'}")
    real = read(folder / "fashion_mnist_study.json")
    if real is not None:
        (folder / "fashion_mnist_study.md").write_text(
            real_data.render(
                real, folder, read(folder / "fashion_mnist_rule_off.json"), read(folder / "fashion_mnist_dilate.json")
            )
        )
        print(f"wrote {folder / 'fashion_mnist_study.md'}")
    claimed = read(folder / "claims.json")
    if claimed is not None and study is not None:
        (folder / "claims.md").write_text(claims.render(claimed, folder, study))
        print(f"wrote {folder / 'claims.md'}")
    multi = read(folder / "multires.json")
    if multi is not None:
        (folder / "multires.md").write_text(multires.render(multi, folder, study, read(folder / "multires_no16.json")))
        print(f"wrote {folder / 'multires.md'}")
    scaled = read(folder / "logn.json")
    if scaled is not None:
        (folder / "logn.md").write_text(logn.render(scaled, folder))
        print(f"wrote {folder / 'logn.md'}")
    aug = read(folder / "augmentation.json")
    if aug is not None:
        fmnist = (read(folder / "fashion_mnist_augmentation.json"), read(folder / "fashion_mnist_study.json"))
        (folder / "augmentation.md").write_text(augmentation.render(aug, folder, study, front, fmnist=fmnist))
        print(f"wrote {folder / 'augmentation.md'}")
    if study is not None:
        page, block = summary_page(folder, study)
        (folder / "summary.md").write_text(page)
        print(f"wrote {folder / 'summary.md'}")
        if folder == DOCS:
            README.write_text(readme_with(block, README.read_text()))
            print(f"wrote {README}'s summary table")
    if folder == DOCS:  # the catalogue of every page names every record, so only docs/ holds them all
        (folder / "benchmarks.md").write_text(catalogue.render(folder))
        print(f"wrote {folder / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
