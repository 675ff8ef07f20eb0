"""EqualityDeleteSet: NULL-safe row equality on the equality columns, as Iceberg Java's StructLikeSet.

Expected values follow the spec ("Equality Delete Files": a NULL delete value matches a NULL data
value) and Java's equality of boxed values: Double.equals / Float.equals compare canonical bit
patterns, so every NaN equals every NaN and -0.0 does not equal 0.0.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icemor.io.equality import EqualityDeleteSet

NAN = float("nan")


def match(keys: list[pa.Array | pa.ChunkedArray], data: list[pa.Array | pa.ChunkedArray]) -> list[bool]:
    out = EqualityDeleteSet(keys).matches(data)
    assert out.dtype == np.bool_
    assert len(out) == (len(data[0]) if data else 0)
    return [bool(x) for x in out]


def arr(values: list[Any], t: pa.DataType) -> pa.Array:
    return pa.array(values, type=t)


def f64_bits(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def f32_from_bits(bits: list[int]) -> pa.Array:
    return pa.array(np.array(bits, dtype=np.uint32).view(np.float32))


# --- empty ----------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [pa.int64(), pa.string(), pa.float64()])
def test_empty_delete_set_matches_nothing(t: pa.DataType) -> None:
    samples: dict[pa.DataType, list[Any]] = {
        pa.int64(): [1, None, 3],
        pa.string(): ["a", None, ""],
        pa.float64(): [NAN, None, 0.0],
    }
    data = samples[t]
    assert match([arr([], t)], [arr(data, t)]) == [False, False, False]


def test_empty_probe() -> None:
    assert match([arr([1, 2], pa.int64())], [arr([], pa.int64())]) == []


# --- integers -------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [pa.int32(), pa.int64()])
def test_dense_int(t: pa.DataType) -> None:
    keys = arr([3, 5, 5, 7, 100], t)
    data = arr([1, 3, 4, 5, 7, 8, 100, 101, -3, 0], t)
    assert match([keys], [data]) == [False, True, False, True, True, False, True, False, False, False]


def test_int_with_huge_range() -> None:
    keys = arr([-(2**62), 0, 2**40, 2**62], pa.int64())
    data = arr([-(2**62), -(2**62) + 1, 0, 1, 2**40, 2**40 + 1, 2**62, 2**62 - 1], pa.int64())
    assert match([keys], [data]) == [True, False, True, False, True, False, True, False]


def test_int_extremes() -> None:
    lo, hi = -(2**63), 2**63 - 1
    assert match([arr([hi, hi - 1], pa.int64())], [arr([lo, lo + 1, hi, hi - 2], pa.int64())]) == [
        False,
        False,
        True,
        False,
    ]
    assert match([arr([lo, hi], pa.int64())], [arr([lo, 0, hi, -1], pa.int64())]) == [
        True,
        False,
        True,
        False,
    ]


def test_many_random_ints_against_python_set() -> None:
    rng = np.random.default_rng(7)
    for span in (50, 10**6, 2**50):
        keys = rng.integers(-span, span, 300)
        data = rng.integers(-span, span, 2000)
        data[:300] = keys  # make sure there are hits
        expected = [int(v) in set(keys.tolist()) for v in data]
        assert match([pa.array(keys)], [pa.array(data)]) == expected


def test_int_null_semantics() -> None:
    keys = arr([1, None, 2], pa.int64())
    data = arr([None, 1, 2, 3, None], pa.int64())
    assert match([keys], [data]) == [True, True, True, False, True]


def test_int_null_data_never_matches_non_null_deletes() -> None:
    keys = arr([0, 1, 2], pa.int64())  # 0 is what a naive fill_null(0) would turn NULL into
    data = arr([None, 0, None, 5], pa.int64())
    assert match([keys], [data]) == [False, True, False, False]


def test_int_null_data_never_matches_huge_range_deletes() -> None:
    keys = arr([0, 2**50], pa.int64())
    assert match([keys], [arr([None, 0, 2**50], pa.int64())]) == [False, True, True]


@pytest.mark.parametrize(
    ("t", "value"),
    [
        (pa.int64(), 1),
        (pa.int32(), 0),
        (pa.float64(), 0.0),
        (pa.date32(), dt.date(1970, 1, 1)),
        (pa.timestamp("us"), dt.datetime(1970, 1, 1)),
    ],
)
def test_all_null_single_column(t: pa.DataType, value: Any) -> None:
    """An equality delete file that deletes only `col IS NULL` rows."""
    keys = pa.nulls(2, type=t)
    assert match([keys], [arr([None, value], t)]) == [True, False]


def test_all_null_single_string_column() -> None:
    assert match([pa.nulls(2, type=pa.string())], [arr([None, "", "a"], pa.string())]) == [True, False, False]


# --- floating point -------------------------------------------------------------------------


def test_float_nan_matches_nan() -> None:
    keys = arr([NAN, 1.5], pa.float64())
    data = arr([NAN, 1.5, 2.5, None], pa.float64())
    assert match([keys], [data]) == [True, True, False, False]


def test_float_any_nan_payload_matches() -> None:
    # Double.equals compares doubleToLongBits, which maps every NaN to 0x7ff8000000000000
    keys = arr([NAN], pa.float64())
    data = pa.array(
        [f64_bits(0x7FF8000000000001), f64_bits(0xFFF8000000000000), f64_bits(0x7FF0000000000001)]
    )
    assert match([keys], [data]) == [True, True, True]


def test_float_negative_zero_is_not_zero() -> None:
    assert match([arr([0.0], pa.float64())], [arr([-0.0, 0.0], pa.float64())]) == [False, True]
    assert match([arr([-0.0], pa.float64())], [arr([-0.0, 0.0], pa.float64())]) == [True, False]


def test_float32() -> None:
    keys = f32_from_bits([0x7FC00000, 0x00000000, 0x3FC00000])  # NaN, +0.0, 1.5
    data = f32_from_bits([0x7FC00001, 0xFFC00000, 0x80000000, 0x00000000, 0x3FC00000, 0x40000000])
    assert match([keys], [data]) == [True, True, False, True, True, False]


def test_float_nulls() -> None:
    keys = arr([None, 0.0], pa.float64())
    data = arr([None, 0.0, -0.0, NAN], pa.float64())
    assert match([keys], [data]) == [True, True, False, False]
    keys = arr([NAN], pa.float64())
    assert match([keys], [arr([None, NAN], pa.float64())]) == [False, True]


# --- strings, binary, booleans --------------------------------------------------------------


def test_strings() -> None:
    keys = arr(["koala", "", "ÄÖ", None], pa.string())
    data = arr(["koala", "Koala", "", None, "ÄÖ", "AO", "koala "], pa.string())
    assert match([keys], [data]) == [True, False, True, True, True, False, False]


def test_strings_null_vs_empty() -> None:
    assert match([arr([""], pa.string())], [arr([None, ""], pa.string())]) == [False, True]
    assert match([arr([None], pa.string())], [arr([None, ""], pa.string())]) == [True, False]


def test_strings_dictionary_encoded_data() -> None:
    data = arr(["a", "b", None, "a"], pa.string()).dictionary_encode()
    assert match([arr(["a", None], pa.string())], [data]) == [True, False, True, True]


def test_large_string_data_against_string_deletes() -> None:
    data = arr(["a", "b", None], pa.large_string())
    assert match([arr(["b"], pa.string())], [data]) == [False, True, False]


def test_binary_and_fixed() -> None:
    assert match([arr([b"\x00", None], pa.binary())], [arr([b"\x00", b"", None], pa.binary())]) == [
        True,
        False,
        True,
    ]
    zero16 = b"\x00" * 16
    keys = arr([zero16], pa.binary(16))
    assert match([keys], [arr([zero16, None, b"\x01" * 16], pa.binary(16))]) == [True, False, False]


def test_booleans() -> None:
    assert match([arr([False], pa.bool_())], [arr([True, False, None], pa.bool_())]) == [False, True, False]
    assert match([arr([None], pa.bool_())], [arr([True, False, None], pa.bool_())]) == [False, False, True]


# --- decimals, dates, timestamps ------------------------------------------------------------


@pytest.mark.parametrize("t", [pa.decimal128(38, 2), pa.decimal128(10, 2)])
def test_decimals(t: pa.DataType) -> None:
    keys = arr([Decimal("1.10"), Decimal("-3.00")], t)
    data = arr([Decimal("1.10"), Decimal("1.00"), Decimal("-3.00"), Decimal("3.00")], t)
    assert match([keys], [data]) == [True, False, True, False]


# regression: a NULL on a decimal(P < 19 + S, S) column used to crash the NULL filler


@pytest.mark.parametrize("t", [pa.decimal128(38, 2), pa.decimal128(10, 2)])
def test_decimal_nulls(t: pa.DataType) -> None:
    keys = arr([Decimal("1.10"), None], t)
    data = arr([Decimal("1.10"), None, Decimal("0.00")], t)
    assert match([keys], [data]) == [True, True, False]


@pytest.mark.parametrize("t", [pa.decimal128(38, 2), pa.decimal128(9, 0)])
def test_decimal_null_data_non_null_deletes(t: pa.DataType) -> None:
    keys = arr([Decimal("0")], t)
    assert match([keys], [arr([None, Decimal("0")], t)]) == [False, True]


def test_dates() -> None:
    d = dt.date
    keys = arr([d(2020, 1, 1), d(1969, 12, 31), None], pa.date32())
    data = arr([d(2020, 1, 1), d(2020, 1, 2), d(1969, 12, 31), None, d(1970, 1, 1)], pa.date32())
    assert match([keys], [data]) == [True, False, True, True, False]


@pytest.mark.parametrize("t", [pa.timestamp("us"), pa.timestamp("us", tz="UTC"), pa.timestamp("ns")])
def test_timestamps(t: pa.DataType) -> None:
    ts = dt.datetime
    keys = arr([ts(2020, 1, 1, 12, 0, 0, 1), ts(1900, 1, 1)], t)
    data = arr([ts(2020, 1, 1, 12, 0, 0, 1), ts(2020, 1, 1, 12, 0, 0, 2), None, ts(1900, 1, 1)], t)
    assert match([keys], [data]) == [True, False, False, True]


def test_timestamps_far_apart() -> None:
    ts = dt.datetime
    t = pa.timestamp("us")
    keys = arr([ts(1, 1, 1), ts(9999, 12, 31)], t)
    data = arr([ts(1, 1, 1), ts(5000, 1, 1), ts(9999, 12, 31), None], t)
    assert match([keys], [data]) == [True, False, True, False]


def test_time_of_day() -> None:
    t = pa.time64("us")
    assert match([arr([dt.time(1, 2, 3)], t)], [arr([dt.time(1, 2, 3), dt.time(1, 2, 4), None], t)]) == [
        True,
        False,
        False,
    ]


# --- several columns ------------------------------------------------------------------------


def test_multi_column_spec_example() -> None:
    """Spec example: delete (id=4, category=NULL); NULL matches NULL, a value never matches NULL."""
    keys = [arr([4], pa.int64()), arr([None], pa.string())]
    ids = arr([1, 2, 3, 4, 4, None], pa.int64())
    cats = arr(["marsupial", "toy", None, None, "bear", None], pa.string())
    assert match(keys, [ids, cats]) == [False, False, False, True, False, False]


def test_multi_column_all_combinations() -> None:
    keys = [arr([1, 1, None, None], pa.int64()), arr(["a", None, "a", None], pa.string())]
    ids, cats, expected = [], [], []
    for i in (1, 2, None):
        for c in ("a", "b", None):
            ids.append(i)
            cats.append(c)
            expected.append(i in (1, None) and c in ("a", None))
    assert match(keys, [arr(ids, pa.int64()), arr(cats, pa.string())]) == expected


def test_multi_column_duplicates_and_chunks() -> None:
    keys = [
        pa.chunked_array([[1, 1], [2]], pa.int64()),
        pa.chunked_array([["x", "x"], ["y"]], pa.string()),
    ]
    data = [pa.chunked_array([[1, 2], [2, 1]], pa.int64()), pa.chunked_array([["x"], ["x", "y", "y"]])]
    assert match(keys, data) == [True, False, True, False]


def test_multi_column_floats() -> None:
    keys = [arr([NAN, -0.0], pa.float64()), arr([1, 2], pa.int32())]
    data = [arr([NAN, 0.0, -0.0, NAN, None], pa.float64()), arr([1, 2, 2, 2, 1], pa.int32())]
    assert match(keys, data) == [True, False, True, False, False]


def test_multi_column_nan_payloads() -> None:
    keys = [arr([NAN], pa.float64()), arr([1], pa.int64())]
    data = [pa.array([f64_bits(0xFFF8000000000000), f64_bits(0x7FF8000000000001)]), arr([1, 1], pa.int64())]
    assert match(keys, data) == [True, True]


def test_multi_column_mixed_types() -> None:
    d = dt.date
    keys = [
        arr([d(2020, 1, 1), d(2020, 1, 1)], pa.date32()),
        arr([b"k", None], pa.binary()),
        arr([True, False], pa.bool_()),
    ]
    data = [
        arr([d(2020, 1, 1), d(2020, 1, 1), d(2020, 1, 1), d(2020, 1, 2)], pa.date32()),
        arr([b"k", None, None, b"k"], pa.binary()),
        arr([True, False, True, True], pa.bool_()),
    ]
    assert match(keys, data) == [True, True, False, False]


def test_multi_column_promoted_width() -> None:
    # an int delete column probed by a long data column (type promotion int -> long)
    keys = [arr([1, 2], pa.int32()), arr(["a", "b"], pa.string())]
    data = [arr([1, 2, 2], pa.int64()), arr(["a", "b", "a"], pa.string())]
    assert match(keys, data) == [True, True, False]


def test_num_rows_and_width() -> None:
    s = EqualityDeleteSet([arr([1, 1, None], pa.int64()), arr(["a", "a", None], pa.string())])
    assert s.width == 2
    assert s.num_rows == 3
