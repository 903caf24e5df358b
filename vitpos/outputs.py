"""What every command does with the files it writes: create its ``--out``, turn a failed write into one line, and
print paths and commands that can be pasted back into a shell.

``--overwrite`` never removes what vitpos did not write: each command checks that a target is its own output before
it replaces it (``train.py`` moves an earlier run aside instead), and refuses otherwise.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

from .errors import ConfigError

# A write that fails for want of room: the disk is full, a quota or a file-size limit is reached.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def shell(*words: object) -> str:
    """``words`` as one shell command line: each quoted where a shell would split or expand it."""
    return " ".join(shlex.quote(str(w)) for w in words)


def make_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the folder ``path`` (and its parents); a path that cannot be one is a ConfigError naming ``flag``."""
    p = Path(path)
    check_creatable(p, flag)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {flag} {p}: {why(e)}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {p} is not writable")
    return p


def check_creatable(path: str | Path, flag: str = "--out", folder: bool = True) -> None:
    """``path`` (a folder, or a file where ``folder`` is False) can be made where it is, checked before a long
    computation writes it: its nearest existing ancestor is a writable folder."""
    p = Path(path)
    if p.exists() and folder and not p.is_dir():
        raise ConfigError(f"{flag} {p} is a file, not a folder")
    if p.exists() and not folder and p.is_dir():
        raise ConfigError(f"{flag} {p} is a folder; give a file name such as {p / 'model.onnx'}")
    base = p if folder else p.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise ConfigError(f"cannot create {flag} {p}: {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create {flag} {p}: {base} is not writable")


def read_json(path: str | Path) -> Any:
    """The JSON content of ``path``, or None where it cannot be read or parsed (to tell a command's own output)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def why(e: OSError) -> str:
    """The reason of an OSError in a few words ('No space left on device'), without the errno and path."""
    return e.strerror or str(e).splitlines()[0] or type(e).__name__


def write_failed(e: OSError, path: str | Path, kept: str) -> ConfigError:
    """The one line for a write of ``path`` that failed; ``kept`` says what is left as it was and how to go on."""
    room = " (the disk is full, or a quota or file-size limit is reached)" if e.errno in NO_ROOM else ""
    return ConfigError(f"cannot write {path}: {why(e)}{room}; {kept}")


def aside(path: str | Path) -> Path:
    """A free name beside ``path`` to move it to: ``NAME.old-<time>`` (``NAME.old-<time>-2`` ...)."""
    p = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = p.with_name(f"{p.name}.old-{stamp}"), 1
    while candidate.exists():
        n += 1
        candidate = p.with_name(f"{p.name}.old-{stamp}-{n}")
    return candidate
