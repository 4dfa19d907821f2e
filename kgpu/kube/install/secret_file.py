"""Files that hold a private key (``kgpu manifests -o``, ``kgpu webhook``'s throwaway
certificate), written readable and writable by their owner only (mode 0600)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, mode 0600 whatever the umask and whatever mode a file
    already there had: the bytes go to a new file made 0600 beside it, which then takes its
    place, so the key is never readable by others, not even for a moment."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as out:  # mkstemp makes the file 0600
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
