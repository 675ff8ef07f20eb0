"""CDC's one cleanup path: :class:`WrittenFiles` holds what a unit or a batch wrote and removes it
when the work fails, so that a failed batch leaves nothing behind."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icemor.commit.door import may_have_committed
from icemor.commit.files import delete_quietly
from icemor.io.writers import remove_written

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

    from pyiceberg.io import FileIO
    from pyiceberg.table.snapshots import Snapshot

    from icemor.commit.row_delta import RowDelta
    from icemor.io.writers import DeleteFileTarget
    from icemor.ops.cdc.types import ChangeUnitResult
    from icemor.spec.files import WrittenFile

__all__ = ["WrittenFiles"]


class WrittenFiles:
    """The files a unit or a batch wrote, removed together (best effort) when it fails.

    Used as a context manager around the work: an exception leaving the block removes every file
    held and goes on. The files a commit is given (:meth:`commit`) are the commit's from then on:
    RowDelta removes them when refused and keeps them when the commit may have happened; the
    files still held (key-index sidecars) follow the same rule.
    """

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self.files: list[WrittenFile] = []
        """Data and delete files, in the order written."""
        self.paths: list[str] = []
        """Other files: key-index sidecars."""
        self._targets: list[DeleteFileTarget] = []  # outputs of units that may fail half-written

    def add(self, files: Iterable[WrittenFile] = (), *, paths: Iterable[str] = ()) -> None:
        """Hold ``files`` (data and delete files) and ``paths`` (any other file)."""
        self.files.extend(files)
        self.paths.extend(paths)

    def add_results(self, results: Iterable[ChangeUnitResult]) -> None:
        """Hold what each unit wrote: its files and its key-index sidecars."""
        for r in results:
            self.add(r.written, paths=r.sidecars)

    def add_target(self, target: DeleteFileTarget) -> None:
        """Hold every file a unit writes to ``target``: numbered from 0, found by name when removed
        (a unit that fails returns no list of what it wrote)."""
        self._targets.append(target)

    def remove(self) -> None:
        """Remove every file held, best effort, and hold none."""
        for target in self._targets:
            remove_written(self.io, target)
        delete_quietly(self.io, [*(f.path for f in self.files), *self.paths])
        self.files, self.paths, self._targets = [], [], []

    def commit(self, delta: RowDelta) -> Snapshot:
        """Commit ``delta``, whose added files are its own from now on (it removes them if refused).

        When the commit may have happened, nothing held is removed: the table may reference it.
        """
        given = {f.path for f in delta.added_files}
        self.files = [f for f in self.files if f.path not in given]
        self.paths = [p for p in self.paths if p not in given]
        try:
            return delta.commit()
        except BaseException as e:
            if may_have_committed(e):
                self.files, self.paths, self._targets = [], [], []
            raise

    def __enter__(self) -> WrittenFiles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is not None:
            self.remove()
