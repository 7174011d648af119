"""Dev-mode keys: read a key file under ./var, or create it (mode 0600) when missing.

Only `--dev` start-up uses this; production refuses to start without configured keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from servicekit.secretbox import generate_key


def load_or_create_key(path: Path, generate: Callable[[], str] = generate_key) -> str:
    """Return the key stored at `path`, creating it first if absent.

    Creation uses O_EXCL so two processes starting together agree on one key: the loser reads
    the winner's file. The file is created 0600 (owner read/write only).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = path.read_text().strip()
        if existing:
            return existing
        raise
    value = generate()
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value
