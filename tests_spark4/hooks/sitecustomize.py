"""Test hook of ``test_datasource_stream.py``'s kill-and-restart test, imported by every Python
process of its subprocess (driver, Spark's Python workers) through ``PYTHONPATH``.

``ICEMOR_TEST_PAUSE=<point>:<value>:<marker file>`` makes the process that reaches the point
create the marker and wait, for the test to SIGKILL the whole process group there:

- ``sink-commit:<batch id>``: in the sink's ``commit``, right after the batch's table commit
  (before Spark records the batch as done: a restart runs it again);
- ``source-read:<snapshot id>``: in the streaming source's ``read`` of that snapshot's changes
  (after Spark logged the batch's offsets, before any of its rows reach the sink).

``ICEMOR_TEST_COUNT=<counter file>:<module>.<function>,...`` (``test_datasource.py``'s count of
parsing and planning) has each process append a line ``<module>.<function> <type of the first
argument>`` to the file at every call of those functions, wherever a module imported them from.

Without the variables nothing is imported or changed.
"""

from __future__ import annotations

import os

_PAUSE = os.environ.get("ICEMOR_TEST_PAUSE")


def _wait_here(marker: str) -> None:
    import time

    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(3600)


if _PAUSE:
    _point, _value, _marker = _PAUSE.split(":", 2)
    if _point == "sink-commit":
        import icemor.spark as _facade

        _apply = _facade._apply_changes

        def _apply_then_pause(*args, **kwargs):  # type: ignore[no-untyped-def]
            result = _apply(*args, **kwargs)
            if kwargs.get("batch_id") == int(_value):
                _wait_here(_marker)
            return result

        _facade._apply_changes = _apply_then_pause
    elif _point == "source-read":
        import pickle

        import icemor.engines.spark.datasource.stream as _source

        _read = _source.read_changes_blob

        def _read_or_pause(blob, target):  # type: ignore[no-untyped-def]
            step = pickle.loads(blob)[1]
            if step.snapshot_id == int(_value):
                _wait_here(_marker)
            return _read(blob, target)

        _source.read_changes_blob = _read_or_pause


def _counted(path: str, name: str, fn):  # type: ignore[no-untyped-def]
    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        with open(path, "a") as f:  # one short line per write: appends of processes do not mix
            f.write(f"{name} {type(args[0]).__name__ if args else '-'}\n")
        return fn(*args, **kwargs)

    return counting


_COUNT = os.environ.get("ICEMOR_TEST_COUNT")
if _COUNT:
    import importlib
    import sys

    _path, _names = _COUNT.rsplit(":", 1)
    for _name in _names.split(","):
        _module, _attr = _name.rsplit(".", 1)
        _original = getattr(importlib.import_module(_module), _attr)
        _wrapper = _counted(_path, _name, _original)
        # every module that imported it holds its own name for it; later imports get the wrapper
        for _loaded in list(sys.modules.values()):
            mine = getattr(_loaded, "__name__", "").startswith("icemor")
            if mine and _loaded.__dict__.get(_attr) is _original:
                setattr(_loaded, _attr, _wrapper)
