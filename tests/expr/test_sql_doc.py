"""docs/sql.md's condition examples hold: each row of its table, run on a table holding that row.

The expected answers are the document's (written from Spark SQL's rules), not icemor's output.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icemor

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"

_TYPES: dict[str, pa.DataType] = {
    "int": pa.int32(),
    "double": pa.float64(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", "UTC"),
    "uuid": pa.uuid(),
}


def _examples() -> list[tuple[str, str, str, bool]]:
    text = DOC.read_text()
    block = text.split("<!-- condition-examples -->")[1].split("<!-- /condition-examples -->")[0]
    rows = []
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        condition, kind, value, selected = cells
        rows.append((condition.strip("`"), kind, value, {"yes": True, "no": False}[selected]))
    return rows


def _value(kind: str, text: str) -> Any:
    if text == "NULL":
        return None
    if kind == "int":
        return int(text)
    if kind == "double":
        return math.nan if text == "NaN" else float(text)
    if kind == "date":
        return dt.date.fromisoformat(text)
    if kind in ("timestamp", "timestamptz"):
        return dt.datetime.fromisoformat(text)
    if kind == "uuid":
        return uuid.UUID(text).bytes
    return text


def test_the_document_has_examples() -> None:
    assert len(_examples()) >= 20


@pytest.mark.parametrize(("condition", "kind", "value", "selected"), _examples())
def test_example_holds(home: Path, condition: str, kind: str, value: str, selected: bool) -> None:
    raw = [_value(kind, value)]
    column = (
        pa.ExtensionArray.from_storage(pa.uuid(), pa.array(raw, pa.binary(16)))
        if kind == "uuid"
        else pa.array(raw, _TYPES[kind])
    )
    name = "db.t_" + re.sub(r"\W", "", f"{kind}{abs(hash((condition, value)))}")
    table = icemor.create_table(name, pa.table({"id": pa.array([1], pa.int64()), "x": column}))
    assert table.scan(row_filter=condition).count() == int(selected), condition
    assert len(table.scan(row_filter=condition).to_arrow()) == int(selected), condition
    assert table.delete(condition).deleted_rows == int(selected), condition
    assert table.scan().count() == 1 - int(selected)
