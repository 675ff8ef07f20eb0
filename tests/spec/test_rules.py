"""Sequence-number rules of the spec's "Scan Planning" section."""

from __future__ import annotations

import pytest

from icemor.spec.rules import (
    DELETE_FILE_PATH_FIELD_ID,
    DELETE_FILE_POS_FIELD_ID,
    DELETE_FILE_ROW_FIELD_ID,
    equality_delete_applies,
    position_delete_applies,
)


def test_reserved_field_ids() -> None:
    # spec, "Position Delete Files": file_path 2147483546, pos 2147483545, row 2147483544
    assert DELETE_FILE_PATH_FIELD_ID == 2147483546 == 2**31 - 1 - 101
    assert DELETE_FILE_POS_FIELD_ID == 2147483545 == 2**31 - 1 - 102
    assert DELETE_FILE_ROW_FIELD_ID == 2147483544 == 2**31 - 1 - 103


@pytest.mark.parametrize(
    ("data_seq", "delete_seq", "expected"),
    [
        (1, 2, True),  # older data
        (2, 2, True),  # same commit: a position delete may delete rows added in its own commit
        (3, 2, False),  # newer data is never touched
        (0, 0, True),  # v1 files inherit sequence number 0
        (0, 5, True),
        (2**62, 2**62, True),
        (2**62 + 1, 2**62, False),
    ],
)
def test_position_delete_rule(data_seq: int, delete_seq: int, expected: bool) -> None:
    assert position_delete_applies(data_seq, delete_seq) is expected


@pytest.mark.parametrize(
    ("data_seq", "delete_seq", "expected"),
    [
        (1, 2, True),
        (2, 2, False),  # same commit: equality deletes apply strictly to older data
        (3, 2, False),
        (0, 0, False),
        (0, 1, True),
        (2**62 - 1, 2**62, True),
        (2**62, 2**62, False),
    ],
)
def test_equality_delete_rule(data_seq: int, delete_seq: int, expected: bool) -> None:
    assert equality_delete_applies(data_seq, delete_seq) is expected


@pytest.mark.parametrize("data_seq", range(5))
@pytest.mark.parametrize("delete_seq", range(5))
def test_rules_differ_exactly_on_equal_sequence_numbers(data_seq: int, delete_seq: int) -> None:
    assert position_delete_applies(data_seq, delete_seq) == (data_seq <= delete_seq)
    assert equality_delete_applies(data_seq, delete_seq) == (data_seq < delete_seq)
    differ = position_delete_applies(data_seq, delete_seq) != equality_delete_applies(data_seq, delete_seq)
    assert differ == (data_seq == delete_seq)
