"""Files written for a commit: name the path a failed write was writing, remove them best effort.

The bottom of the commit layer: every module of it may import this one, it imports none of them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from icemor.exceptions import WriteFailedError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyiceberg.io import FileIO

__all__ = ["delete_quietly", "writing"]


@contextmanager
def writing(path: str) -> Iterator[None]:
    """Raise an OSError of the block (disk full, permission denied) as WriteFailedError naming ``path``."""
    try:
        yield
    except OSError as e:
        raise WriteFailedError.of(path, e) from e


def delete_quietly(io: FileIO, paths: Iterable[str]) -> list[str]:
    """Delete files best effort; return the paths that could not be deleted."""
    failed = []
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except OSError:
            failed.append(path)
    return failed
