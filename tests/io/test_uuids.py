"""uuids as 16 bytes and as their text: both directions exact, NULLs and slices kept, bad text refused."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from icemor.exceptions import InvalidArgumentError
from icemor.io.uuids import to_text_batch, uuid_from_strings, uuid_strings

VALUES = [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.uuid4(), None, uuid.uuid4()]


def _array(values: list[uuid.UUID | None]) -> pa.Array:
    storage = pa.array([None if v is None else v.bytes for v in values], pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def test_text_is_pythons_canonical_form() -> None:
    assert uuid_strings(_array(VALUES)).to_pylist() == [None if v is None else str(v) for v in VALUES]


def test_slices_keep_their_values_and_nulls() -> None:
    assert uuid_strings(_array(VALUES).slice(2, 3)).to_pylist() == [str(VALUES[2]), None, str(VALUES[4])]


def test_text_reads_back_in_either_case() -> None:
    text = pa.array([None if v is None else str(v).upper() for v in VALUES])
    back = uuid_from_strings(text, pa.uuid())
    assert back.to_pylist() == VALUES


@pytest.mark.parametrize("bad", ["nope", "102cb62f-e7a3-4d5c-9a1b-0c2d3e4f5a6", "g02cb62f-e7a3-4d5c-9a1b-0c2d3e4f5a6b",
                                 "102cb62fe7a34d5c9a1b0c2d3e4f5a6b00"])  # fmt: skip
def test_text_that_is_no_uuid_is_one_line(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a uuid"):
        uuid_from_strings(pa.array([str(VALUES[0]), bad]), pa.uuid())


def test_batches_turn_nested_uuids_into_text() -> None:
    arr = _array(VALUES)
    batch = pa.record_batch(
        [arr, pa.StructArray.from_arrays([arr, pa.array(range(5))], names=["u", "x"]),
         pa.ListArray.from_arrays(pa.array([0, 2, 2, 5, 5, 5]), arr)],
        names=["u", "s", "l"],
    )  # fmt: skip
    target = pa.schema(
        [
            ("u", pa.string()),
            ("s", pa.struct([("u", pa.string()), ("x", pa.int64())])),
            ("l", pa.list_(pa.string())),
        ]
    )
    out = to_text_batch(batch, target).to_pydict()
    text = [None if v is None else str(v) for v in VALUES]
    assert out["u"] == text
    assert [r["u"] for r in out["s"]] == text
    assert out["l"] == [text[:2], [], text[2:], [], []]
