"""The import graph of vitpos: no module imports, directly or through others, a module that imports it back, and
the layers import one way (the model knows no run config, the checkpoint reader no optimizer, the evaluator no
training run). Function-level imports count: a lazy import still ties two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitpos"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The vitpos modules ``path`` names in any import statement (a name imported from a package counts as the
    submodule when there is one of that name, else as the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "vitpos"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "vitpos":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return found - {name}


def graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) & modules for p in paths}


def reaches(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in g[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_is_read():
    g = graph()
    assert "vitpos.pos.base" in g["vitpos.model"]  # a relative import from a submodule
    assert "vitpos.errors" in g["vitpos.data.base"]  # a relative import two levels up
    assert "vitpos.config" in g["vitpos.lit"]


def test_no_module_imports_itself_through_others():
    g = graph()
    circles = sorted(m for m in g if m in reaches(g, m))
    assert not circles, f"modules on an import circle: {circles}"


# (module, what it must not import): through any other module, or (direct) itself
ONE_WAY = [
    ("vitpos.errors", "vitpos"),  # the leaf: imports nothing of vitpos
    ("vitpos.model", "vitpos.config"),  # the model needs no run config
    ("vitpos.checkpoint", "vitpos.optim"),  # the reader needs no optimizer code
    ("vitpos.checkpoint", "vitpos.lit"),
    ("vitpos.evaluate", "vitpos.training"),  # the evaluator needs nothing of the training run
    ("vitpos.evaluate.__main__", "vitpos.training"),
    ("vitpos.config", "vitpos.data"),
    ("vitpos.rundir", "lightning"),  # the run folder is plain Python
    # the config names no registry itself (vitpos.cli resolves the names); it builds the model, which uses one
    ("vitpos.config", "vitpos.pos", "direct"),
    ("vitpos.config", "vitpos.stems", "direct"),
]


@pytest.mark.parametrize(("module", "never", "how"), [(*rule, "through any")[:3] for rule in ONE_WAY])
def test_imports_run_one_way(module, never, how):
    g = graph()
    if never == "lightning":  # a third-party package: the module's own imports only
        tree = ast.parse((PACKAGE.parent / (module.replace(".", "/") + ".py")).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(n.split(".")[0] == never for n in names)
        return
    if never == "vitpos":
        assert not g[module]
        return
    imported = g[module] if how == "direct" else reaches(g, module)
    found = {m for m in imported if m == never or m.startswith(never + ".")}
    assert not found, f"{module} imports {sorted(found)}, directly or through other modules"


def test_training_and_evaluation_import_no_optional_data_library():
    """LitData (with its cloud clients), `datasets` and ONNX load only for the features that need them (--data shards,
    --data hf:..., export): a machine without them trains and evaluates the other data sets."""
    import subprocess
    import sys

    optional = ("litdata", "boto3", "datasets", "onnx", "onnxruntime")
    code = ("import sys, vitpos, vitpos.training, vitpos.cli, vitpos.evaluate.__main__, vitpos.evaluate.sweep; "
            f"print(' '.join(m for m in {optional} if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr[-2000:]
