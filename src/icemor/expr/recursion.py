"""Room for a recursive-descent parser: sqlglot's, at the nesting icemor accepts.

sqlglot's recursive descent takes ~21 Python frames a level of parentheses, ~24 a function call
(measured: 100 levels of abs( parse and translate in ~2,450); Python's default recursion limit
of 1,000 gave a RecursionError from 48 levels of parentheses. :func:`deep` runs a parse on a
thread with a stack of its own and the recursion limit raised for twice that, for
:data:`~icemor.expr.sql.MAX_NESTING` levels of any mix (:mod:`icemor.expr.dml` and
:mod:`icemor.expr.statements` parse statements with it).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TYPE_CHECKING, TypeVar

from icemor.exceptions import InvalidArgumentError
from icemor.expr.sql import MAX_NESTING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["deep"]

_T = TypeVar("_T")

_RECURSION_LIMIT = 50 * MAX_NESTING
# the thread parsing has a stack of its own, large enough for that depth whatever the caller's
_STACK_BYTES = 64 << 20


class _Room:
    """The process's recursion limit raised while any thread parses (it is one for all threads):
    the first to enter raises it, the last to leave puts back what was there."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self.lock:
            if self.users == 0:
                self.saved = sys.getrecursionlimit()
                sys.setrecursionlimit(max(self.saved, _RECURSION_LIMIT))
            self.users += 1
        try:
            yield
        finally:
            with self.lock:
                self.users -= 1
                # unless someone set another limit meanwhile
                if self.users == 0 and sys.getrecursionlimit() == max(self.saved, _RECURSION_LIMIT):
                    sys.setrecursionlimit(self.saved)


_ROOM = _Room()
_STACK_LOCK = threading.Lock()  # threading.stack_size is the process's too


def deep(run: Callable[[], _T]) -> _T:
    """``run()`` on a thread with room for sqlglot's recursion at MAX_NESTING levels.

    Raises:
        InvalidArgumentError: A RecursionError all the same (nesting the size check does not
            count, such as ``!!!…x`` or ``a[a[…]]``), as one line.
        BaseException: Whatever ``run`` raised.
    """
    result: list[_T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(run())
        except BaseException as e:  # raised again in the caller's thread
            failure.append(e)

    with _ROOM.held():
        with _STACK_LOCK:
            previous = threading.stack_size(_STACK_BYTES)
            try:
                thread = threading.Thread(target=target, name="icemor-sql-parse", daemon=True)
                thread.start()
            finally:
                threading.stack_size(previous)
        thread.join()
    if failure:
        if isinstance(failure[0], RecursionError):
            msg = "the statement nests too deeply for the SQL parser: simplify it"
            raise InvalidArgumentError(msg) from failure[0]
        raise failure[0]
    return result[0]
