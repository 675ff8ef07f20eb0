"""Running the ``icemor`` command: error handling, signals and log notes around the typer app.

Every expected failure prints one line on stderr and exits with code 2 (a traceback only
with ``--debug``). Ctrl-C and SIGTERM exit with code 130 and a one-line note; a write they
interrupt removes what it wrote unless the catalog may have committed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any

import typer
from pyiceberg import exceptions as _pe

from icemor.cli.app import OPTIONS, Options, app, note
from icemor.cli.commands import register
from icemor.exceptions import (
    NO_ROOM_ERRNOS,
    IcemorError,
    RedactFilter,
    first_line,
    formatted_traceback,
    os_reason,
    redact,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Terminated", "main", "run"]

# every command, once, in the order `icemor --help` lists them
register(app)

# pyiceberg's errors share no base class; these are the ones a user's input can cause.
_PYICEBERG_USER_ERRORS: tuple[type[Exception], ...] = (
    _pe.ValidationError,
    _pe.NoSuchTableError,
    _pe.NoSuchNamespaceError,
    _pe.NoSuchIdentifierError,
    _pe.NamespaceNotEmptyError,
    _pe.TableAlreadyExistsError,
    _pe.CommitFailedException,
    _pe.ResolveError,
    _pe.NoSuchPropertyException,
)
_USER_ERRORS: tuple[type[Exception], ...] = (
    IcemorError,
    FileNotFoundError,
    PermissionError,
    *_PYICEBERG_USER_ERRORS,
)


def _run(fn: Callable[[Options], Any]) -> int:
    """Run the app; usage errors are click's (exit 2), ours become one line on stderr (exit 2)."""
    opts = Options()
    token = OPTIONS.set(opts)
    try:
        fn(opts)
    except SystemExit as e:
        if _interrupt(e) is not None:  # typer turns Ctrl-C into exit 130, silently
            _note_interrupted(_interrupt(e))
            return 130
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt as e:
        _note_interrupted(e)
        return 130
    except _USER_ERRORS as e:
        if opts.debug:
            raise
        typer.echo(f"icemor: error: {first_line(e)}", err=True)
        return 2
    except _catalog_failures() as e:
        from icemor.catalog import catalog_error  # noqa: PLC0415 - cost: icemor.catalog ~7 ms at CLI start-up

        known = catalog_error(e, opts.catalog_name)
        if opts.debug or known is None:
            raise
        typer.echo(f"icemor: error: {first_line(known)}", err=True)
        return 2
    except OSError as e:
        if opts.debug or e.errno not in NO_ROOM_ERRNOS:
            raise
        # disk full, read-only file system: the write sites name the file; this is the rest
        where = f"{redact(str(e.filename))}: " if e.filename else ""
        typer.echo(f"icemor: error: {where}{os_reason(e)}", err=True)
        return 2
    finally:
        if opts.spark_progress is not None:
            opts.spark_progress.stop()
        OPTIONS.reset(token)
    return 0


def _catalog_failures() -> tuple[type[BaseException], ...]:
    """A catalog that cannot be used (no driver, unreachable, refusing, a database that does not
    open): one line, exit 2.

    Evaluated only when an error reaches :func:`_run` (requests is not imported for nothing).
    """
    import sqlite3  # noqa: PLC0415 - cost: sqlite3 ~2 ms at CLI start-up

    import requests  # noqa: PLC0415 - cost: requests ~100 ms at CLI start-up
    from sqlalchemy.exc import ArgumentError, DBAPIError  # noqa: PLC0415 - cost: sqlalchemy ~330 ms

    return (
        _pe.NotInstalledError,
        _pe.RESTError,
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        DBAPIError,
        ArgumentError,
        sqlite3.Error,
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that an unfinished write removes its files the same way."""


def _interrupt(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt an exit came from, if it did (typer raises Exit(130) from it)."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _note_interrupted(e: BaseException | None) -> None:
    signal_name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
    typer.echo(f"icemor: interrupted ({signal_name})", err=True)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the CLI runs, SIGTERM raises :class:`Terminated` (main thread only: signals need it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class _NoteHandler(logging.Handler):
    """icemor's own warnings (e.g. a verdict store it will not use) as ``icemor: note:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        note(record.getMessage())


@contextlib.contextmanager
def _notes_from_logs() -> Iterator[None]:
    """icemor's warnings as notes; every record the CLI prints (those notes, and other libraries'
    warnings through logging's last-resort handler) and every Python warning shown (pyiceberg's
    deprecation notices quote a catalog's URI) redacted: no credential reaches stderr."""
    show = warnings.showwarning

    def show_redacted(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        show(redact(str(message)), category, filename, lineno, file, line)

    warnings.showwarning = show_redacted
    redacting = RedactFilter()
    last_resort = logging.lastResort
    if last_resort is not None:
        last_resort.addFilter(redacting)
    logger = logging.getLogger("icemor")
    handler = None
    if not logger.handlers:  # else the embedding application configured its own
        handler = _NoteHandler(logging.WARNING)
        handler.addFilter(redacting)
        logger.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            logger.removeHandler(handler)
        if last_resort is not None:
            last_resort.removeFilter(redacting)
        warnings.showwarning = show


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: the process arguments) and return its exit code.

    An error that is not one of the known ones (or any, with ``--debug``) prints its traceback,
    redacted (no password, token or secret property in it), and exits 1 as Python would.
    """
    os.environ.setdefault("PYICEBERG_MAX_WORKERS", str(os.cpu_count() or 1))
    with _sigterm_as_interrupt(), _notes_from_logs():
        try:
            return _run(lambda _: app(args=argv, prog_name="icemor"))
        except Exception as e:
            sys.stderr.write(formatted_traceback(e))
            sys.stderr.flush()
            return 1


def main() -> None:
    """Console entry point."""
    code = run()
    if code == 130:
        # An interrupt can land inside the stdlib's thread-pool bookkeeping (a worker started
        # but not yet registered for shutdown): the interpreter would then wait for it forever.
        # The cleanup has run; leave without joining background threads.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
