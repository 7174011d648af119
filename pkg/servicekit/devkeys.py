"""Dev-mode keys: read a key file under ./var, or create it (mode 0600) when missing.

Only `--dev` start-up uses this; production refuses to start without configured keys.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from servicekit.data.secretbox import generate_key


def load_or_create_key(path: Path, generate: Callable[[], str] = generate_key) -> str:
    """Return the key stored at `path`, creating it first if absent.

    The key is written to a private temporary file (0600, owner read/write only) and then
    hard-linked to `path`, which fails if `path` exists: two processes starting together agree
    on one key (the loser reads the winner's file), and no reader ever sees a half-written file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        value = generate()
        fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(value + "\n")
            os.link(temp_name, path)
            return value
        except FileExistsError:
            pass  # another process won the race: use its key
        finally:
            os.unlink(temp_name)
    existing = path.read_text().strip()
    if not existing:
        raise ValueError(f"key file {path} is empty: delete it to generate a new key")
    return existing
