"""Execute the notebooks in place on the results in docs/, so that they are stored with current outputs.

    make notebooks        # or: python notebooks/execute.py [NAME.ipynb ...]

Each notebook reads docs/ unless told otherwise (``VITPOS_DIAG_DIR``, ``VITPOS_RESOLUTION_JSON``);
those variables are cleared here, so the stored outputs always show the published results. The
tests execute the notebooks the same way and compare their text outputs with the stored ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# Each notebook's "read another result" switch; unset, it reads docs/.
INPUT_VARS = ("VITPOS_DIAG_DIR", "VITPOS_RESOLUTION_JSON")


def execute(path: str | Path, timeout: int = 600, **env: str):
    """Run the notebook at ``path`` from a clean state with ``env`` set; return it (not written back)."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    saved = dict(os.environ)
    try:
        for k in (*INPUT_VARS, "MPLBACKEND"):  # MPLBACKEND too: the kernel's inline backend keeps the figures
            os.environ.pop(k, None)
        # tqdm (imported by Lightning) warns in a kernel without ipywidgets; no progress bar is shown here anyway
        quiet = "ignore:IProgress not found"
        os.environ.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": quiet, **env})
        client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False,
                                         resources={"metadata": {"path": str(ROOT)}})  # fmt: skip
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def text_outputs(nb) -> list[str]:
    """The text each code cell printed or displayed (stdout, text/plain, text/markdown), one string per cell.

    stderr is left out: it holds warnings that depend on the installed packages, not on the results."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                parts.append(o.get("text", ""))
            elif o.get("output_type") in ("display_data", "execute_result"):
                data = o.get("data", {})
                parts.append(str(data.get("text/markdown", data.get("text/plain", ""))))
            elif o.get("output_type") == "error":
                parts.append(f"{o.get('ename')}: {o.get('evalue')}")
        texts.append("".join(parts))
    return texts


def main(argv: list[str] | None = None) -> int:
    import nbformat

    names = argv if argv is not None else sys.argv[1:]
    paths = [NOTEBOOKS / n for n in names] if names else sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        nb = execute(path)
        nbformat.write(nb, path)
        print(f"executed {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
