"""The ``icemor`` command line: a thin layer over the public table API.

- ``app.py``: the typer app, its global options (``Options``, one per invocation) and what
  every command uses (opening the catalog, a table or Spark; shared option types);
- ``commands/``: the commands by family (``catalog``, ``read``, ``write``, ``maintenance``,
  ``health``, ``demo``) as plain functions, and ``commands.register``, the one place that adds
  them to the app;
- ``runner.py``: :func:`run` and :func:`main`: error handling, signals, log notes;
- ``output.py`` (tables, files, JSON), ``progress.py`` (the progress bars), ``report_html.py``
  (``inspect --html``) and ``demo.py`` (``icemor demo``'s pipeline).
"""

from __future__ import annotations

from icemor.cli.runner import main, run

__all__ = ["main", "run"]
