"""A Spark Connect client session, as icemor tells one, where PySpark has no Connect client.

icemor takes a session for a Connect client's when it is an instance of
``pyspark.sql.connect.session.SparkSession`` found in ``sys.modules`` (icemor.dependencies: the
module is never imported). This venv's PySpark 3.5 lacks the Connect client's libraries, so a
test that runs icemor's Connect side with a stand-in session makes the stand-in's class that one.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

CONNECT_SESSION_MODULE = "pyspark.sql.connect.session"


def as_connect_session_class(monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    """Make ``cls`` the Connect client's ``SparkSession`` for the rest of the test."""
    module = types.ModuleType(CONNECT_SESSION_MODULE)
    module.SparkSession = cls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, CONNECT_SESSION_MODULE, module)
