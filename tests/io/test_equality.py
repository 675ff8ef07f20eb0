"""EqualityDeleteSet: NULL-safe row equality on the equality columns, as Iceberg Java's StructLikeSet.

Expected values follow the spec ("Equality Delete Files": a NULL delete value matches a NULL data
value) and Java's equality of boxed values: Double.equals / Float.equals compare canonical bit
patterns, so every NaN equals every NaN and -0.0 does not equal 0.0.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icemor.io import equality
from icemor.io.equality import EqualityDeleteSet

if TYPE_CHECKING:
    from pathlib import Path

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


# --- the hash index (everything but dense integers) -------------------------------------------


def java_key(v: Any) -> Any:
    """A Python value as Java's boxed equality sees it: floats by canonical bits (NaN == NaN,
    -0.0 != 0.0), everything else by value."""
    if isinstance(v, float):
        return ("NaN",) if np.isnan(v) else ("float", v, np.copysign(1.0, v))
    return v


def model(keys: list[list[Any]], data: list[list[Any]]) -> list[bool]:
    """The spec's rule on plain Python rows: equal on every column, NULL equal to NULL."""
    deleted = {tuple(java_key(v) for v in row) for row in zip(*keys, strict=True)}
    return [tuple(java_key(v) for v in row) in deleted for row in zip(*data, strict=True)]


def random_bytes(rng: np.random.Generator, n: int, lengths: list[int]) -> list[bytes]:
    return [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.choice(lengths, n)]


@pytest.fixture(params=[None, 0, 0b11], ids=["hash", "all-collide", "2-bit-hash"])
def hash_mask(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    """Run a test with the real hash and with deliberately weak ones: results must not change."""
    monkeypatch.setattr(equality, "_HASH_MASK", request.param)
    mask: int | None = request.param
    return mask


def test_strings_of_every_length_against_python_set(hash_mask: int | None) -> None:
    # lengths around the 8-byte word size, equal-length batches, long strings past the word cap
    rng = np.random.default_rng(3)
    lengths = [0, 1, 7, 8, 9, 15, 16, 17, 72, 255, 256, 257, 300, 1000]
    keys: list[Any] = [*random_bytes(rng, 150, lengths), None]
    others = random_bytes(rng, 150, lengths)
    data = [*keys, *others, None, b""]
    data = [data[i] for i in rng.permutation(len(data))]
    expected = model([keys], [data])
    assert any(expected) and not all(expected)
    for t in (pa.binary(), pa.large_binary()):
        assert match([arr(keys, t)], [arr(data, pa.large_binary())]) == expected
    # the same rows hashed inside a bigger buffer, at an offset, and as single-row slices
    s = EqualityDeleteSet([arr(keys, pa.binary())])
    big = arr([b"x" * 5, *data, b"y" * 3], pa.binary())
    assert s.matches([big.slice(1, len(data))]).tolist() == expected
    assert [bool(s.matches([big.slice(1 + i, 1)])[0]) for i in range(len(data))] == expected


def test_equal_length_strings(hash_mask: int | None) -> None:
    """72-char keys (hex digests) probed by a batch of equal-length strings and by a mixed one."""
    import hashlib

    def notes(ids: range) -> list[str]:
        return ["comment-" + hashlib.sha256(str(i).encode()).hexdigest() for i in ids]

    keys = notes(range(0, 400, 2))
    data = notes(range(300))
    expected = [i % 2 == 0 for i in range(300)]
    assert match([arr(keys, pa.string())], [arr(data, pa.large_string())]) == expected
    mixed = [*data, "comment-", None]
    assert match([arr(keys, pa.string())], [arr(mixed, pa.string())]) == [*expected, False, False]
    # differing only in the last byte, or in a string's last partial word
    keys2 = ["a" * 13 + "x", "a" * 13 + "y"]
    assert match([arr(keys2, pa.string())], [arr(["a" * 13 + c for c in "xyzw"], pa.string())]) == [
        True,
        True,
        False,
        False,
    ]


def test_strings_sharing_long_prefixes_and_suffixes() -> None:
    # differences only in the middle of long strings, and prefixes of one another
    base = "p" * 500
    keys = [base[:250] + c + base[:249] for c in "abc"] + [base[:k] for k in (0, 8, 256, 264)]
    data = [base[:250] + c + base[:249] for c in "abcd"] + [base[:k] for k in (0, 1, 8, 9, 256, 257, 264)]
    assert match([arr(keys, pa.string())], [arr(data, pa.string())]) == model([keys], [data])


def test_forced_collisions_never_match_wrongly(hash_mask: int | None) -> None:
    keys = [arr([1, 2, None, 4], pa.int64()), arr(["a", None, "c", "d"], pa.string())]
    data = [
        arr([1, 1, 2, 2, None, None, 4, 5], pa.int64()),
        arr(["a", "b", None, "b", "c", None, "d", "d"], pa.string()),
    ]
    assert match(keys, data) == [True, False, True, False, True, False, True, False]


def test_multi_column_mixed_keys_with_nulls_against_model(hash_mask: int | None) -> None:
    rng = np.random.default_rng(11)
    n = 300
    pools: list[tuple[pa.DataType, list[Any]]] = [
        (pa.int64(), [None, 0, 1, -1, 2**62]),
        (pa.string(), [None, "", "a", "b" * 20]),
        (pa.float64(), [None, 0.0, -0.0, NAN, 1.5]),
        (pa.decimal128(20, 3), [None, Decimal("0.000"), Decimal("-1.250"), Decimal("12345678901234567.891")]),
        (pa.binary(3), [None, b"\0\0\0", b"abc"]),
        (pa.timestamp("us", tz="UTC"), [None, dt.datetime(2020, 1, 1, tzinfo=dt.UTC)]),
        (pa.bool_(), [None, True, False]),
        (pa.date32(), [None, dt.date(1970, 1, 1), dt.date(2000, 2, 29)]),
    ]

    def column(pool: list[Any], size: int) -> list[Any]:
        return [pool[i] for i in rng.integers(0, len(pool), size)]

    for cols in ([0, 1], [1, 2], [2, 3, 4], [5, 6, 7, 1], list(range(8))):
        key_values = [column(pools[c][1], 40) for c in cols]
        data_values = [column(pools[c][1], n) for c in cols]
        for i in range(0, n, 3):  # make a third of the rows deleted ones
            j = int(rng.integers(0, 40))
            for v, k in zip(data_values, key_values, strict=True):
                v[i] = k[j]
        keys = [arr(v, pools[c][0]) for v, c in zip(key_values, cols, strict=True)]
        data = [arr(v, pools[c][0]) for v, c in zip(data_values, cols, strict=True)]
        assert match(keys, data) == model(key_values, data_values)


def test_sparse_ints_and_floats_against_model(hash_mask: int | None) -> None:
    rng = np.random.default_rng(5)
    ints = rng.integers(-(2**62), 2**62, 500)
    keys: list[Any] = [*ints[:200].tolist(), None]
    data: list[Any] = [*ints.tolist(), None]
    assert match([arr(keys, pa.int64())], [arr(data, pa.int64())]) == model([keys], [data])
    floats = [0.0, -0.0, NAN, float("inf"), float("-inf"), 1e-300, None, *rng.normal(size=50).tolist()]
    fkeys = floats[::2]
    assert match([arr(fkeys, pa.float64())], [arr(floats, pa.float64())]) == model([fkeys], [floats])


def test_decimal256_and_odd_fixed_width() -> None:
    t = pa.decimal256(50, 5)
    keys = [Decimal("1" * 40 + ".12345"), Decimal("-0.00001"), None]
    data = [Decimal("1" * 40 + ".12345"), Decimal("1" * 40 + ".12346"), Decimal("0.00001"), None]
    assert match([arr(keys, t)], [arr(data, t)]) == [True, False, False, True]
    w5 = pa.binary(5)
    assert match([arr([b"abcde", b"\0" * 5], w5)], [arr([b"abcde", b"abcdf", b"\0" * 5, None], w5)]) == [
        True,
        False,
        True,
        False,
    ]


def test_nested_field_indicator_column() -> None:
    # key (s.x) with the "ancestor is null" column: a NULL struct differs from a NULL field
    keys = [arr([None, "a"], pa.string()), arr([False, False], pa.bool_())]
    data = [arr([None, None, "a", "b"], pa.string()), arr([False, True, False, False], pa.bool_())]
    assert match(keys, data) == [True, False, True, False]
    null_struct = [arr([None], pa.string()), arr([True], pa.bool_())]
    assert match(null_struct, data) == [False, True, False, False]


def test_sliced_chunked_and_dictionary_inputs(hash_mask: int | None) -> None:
    keys = pa.chunked_array([["k1", "k2"], [], ["k3", None]], pa.string())
    data = pa.array(["zz", "k2", "k4", None, "k3", "k1"], pa.string())
    expected = [False, True, False, True, True, True]
    assert match([keys], [data]) == expected
    assert match([keys], [data.slice(1, 4)]) == expected[1:5]
    assert match([keys], [pa.chunked_array([data.slice(0, 2), data.slice(2)])]) == expected
    assert match([keys], [data.dictionary_encode()]) == expected
    assert match([keys.combine_chunks().dictionary_encode()], [data]) == expected


def test_string_views() -> None:
    keys = arr(["a", "bb" * 10, None], pa.string_view())
    data = arr(["a", "b", "bb" * 10, None], pa.string())
    assert match([keys], [data]) == [True, False, True, True]
    assert match([arr(["a", "bb" * 10], pa.large_string())], [data.cast(pa.string_view())]) == [
        True,
        False,
        True,
        False,
    ]


def test_duplicate_keys_are_stored_once() -> None:
    words = [f"key-{i}" for i in range(1000)]
    once = EqualityDeleteSet([arr(words, pa.string())])
    thrice = EqualityDeleteSet([arr(words * 3, pa.string())])
    assert thrice.nbytes <= once.nbytes
    assert thrice.num_rows == 3000
    probe = arr([*words, "key-1000"], pa.string())
    assert thrice.matches([probe]).tolist() == [True] * 1000 + [False]


def test_string_hash_does_not_depend_on_the_batch() -> None:
    """A value must hash alike wherever it sits: alone, among equal or mixed lengths, at a buffer end."""
    rng = np.random.default_rng(9)
    values = random_bytes(rng, 300, [0, 3, 8, 13, 64, 72, 250, 257, 700])
    whole = equality._hash_bytes(arr(values, pa.binary()))
    assert len(set(whole.tolist())) == len(set(values))
    singles = [int(equality._hash_bytes(arr([v], pa.large_binary()))[0]) for v in values]
    assert whole.tolist() == singles
    same_len = [v for v in values if len(v) == 72]
    assert equality._hash_bytes(arr(same_len, pa.binary())).tolist() == [
        h for h, v in zip(singles, values, strict=True) if len(v) == 72
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-3, 3), st.just(2**40)),
            st.one_of(st.none(), st.sampled_from(["", "a", "ab", "x" * 9, "é" * 5])),
            st.one_of(st.none(), st.sampled_from([0.0, -0.0, NAN, 1.0])),
        ),
        max_size=12,
    ),
    st.lists(st.integers(0, 30), max_size=40),
    st.lists(st.sampled_from([(0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2)]), min_size=1, max_size=1),
    st.sampled_from([None, 0, 1]),
)
def test_property_against_python_model(
    rows: list[tuple[Any, ...]], picks: list[int], cols: list[tuple[int, ...]], mask: int | None
) -> None:
    """Random rows over ints, strings and floats; data rows drawn from the keys and beyond."""
    types = [pa.int64(), pa.string(), pa.float64()]
    universe = [*rows, (None, None, None), (5, "zz", 2.5), (0, "", -0.0)]
    data_rows = [universe[p % len(universe)] for p in picks]
    which = cols[0]
    keys = [[r[c] for r in rows] for c in which]
    data = [[r[c] for r in data_rows] for c in which]
    old = equality._HASH_MASK
    equality._HASH_MASK = mask
    try:
        got = match(
            [arr(k, types[c]) for k, c in zip(keys, which, strict=True)],
            [arr(d, types[c]) for d, c in zip(data, which, strict=True)],
        )
    finally:
        equality._HASH_MASK = old
    assert got == model(keys, data)


# --- long string keys: only the words that tell them apart are hashed -------------------------


def notes(ids: Any) -> list[str]:
    """``'comment-' || sha256(id)``: 72 characters sharing an 8-byte prefix (the benchmark's eq10s)."""
    import hashlib

    return ["comment-" + hashlib.sha256(str(int(i)).encode()).hexdigest() for i in ids]


def index_of(s: EqualityDeleteSet) -> Any:
    assert s._mode == "hash"
    return s._index


def test_long_string_keys_hash_the_telling_words_and_stay_exact(hash_mask: int | None) -> None:
    keys: list[Any] = [*notes(range(0, 3000, 3)), None]
    s = EqualityDeleteSet([arr(keys, pa.string())])
    words = index_of(s)._words
    if hash_mask is None:  # (hashes forced to collide drop the words: see the test after next)
        assert words is not None and words[0] is not None and 0 not in words[0]  # not the shared prefix
    twin = keys[0][:8] + keys[0][8:16] + "#" * 56  # shares the telling word (and length) with a key
    data: list[Any] = [*notes(range(2000)), twin, keys[3][:71], keys[3] + "!", "", None, "comment-"]
    expected = model([keys], [data])
    assert sum(expected) == 668 and not expected[2000] and not expected[2001]
    for t in (pa.string(), pa.large_string(), pa.binary()):
        assert s.matches([arr(data, t)]).tolist() == expected
    # equal-length rows back to back (strided words), alone, and inside a bigger buffer
    same = notes(range(2000))
    assert s.matches([arr(same, pa.string())]).tolist() == expected[:2000]
    big = arr(["x", *same, "y" * 100], pa.string())
    assert s.matches([big.slice(1, 2000)]).tolist() == expected[:2000]
    assert s.matches([big.slice(1999, 2)]).tolist() == expected[1998:2000]


def test_telling_words_of_keys_whose_last_word_is_partial() -> None:
    # 70 bytes told apart by their last word only, which runs 2 bytes past each value: at the end
    # of a buffer those bytes must not be read (nor, zero-masked, change the hash)
    values = ["k" * 64 + f"{i:06d}" for i in range(500)]
    assert {len(v) for v in values} == {70}
    keys = values[::2]
    s = EqualityDeleteSet([arr(keys, pa.string())])
    assert index_of(s)._words == [(8,)]
    expected = [i % 2 == 0 for i in range(500)]
    assert s.matches([arr(values, pa.string())]).tolist() == expected
    for n in (1, 2, 7):
        assert s.matches([arr(values[-n:], pa.string())]).tolist() == expected[-n:]
    padded = arr([*values, "tail" * 30], pa.string())
    assert s.matches([padded.slice(0, 500)]).tolist() == expected
    # lengths that average to 70 are not all 70: no strided shortcut for them
    uneven = [values[0], values[1][:69], values[4], values[6] + "z"]
    assert sum(map(len, uneven)) == 4 * 70
    for probe in (arr(uneven, pa.string()), arr([*uneven, "pad" * 9], pa.string()).slice(0, 4)):
        assert s.matches([probe]).tolist() == [True, False, True, False]


def test_string_keys_no_few_words_tell_apart_hash_whole() -> None:
    # four 8-byte words with two values each: any three leave pairs of keys alike
    parts = ["aaaaaaaa", "bbbbbbbb"]
    keys = ["".join(p) for p in itertools.product(parts, repeat=4)]
    assert len(set(keys)) == 16
    s = EqualityDeleteSet([arr(keys[:12], pa.string())])
    assert index_of(s)._words is None
    data = [*keys, keys[0] + "a", None]
    assert s.matches([arr(data, pa.string())]).tolist() == model([keys[:12]], [data])


def test_telling_words_that_only_tell_the_sample_apart_are_dropped() -> None:
    """The words are chosen on a sample of the keys; when the other keys collide on them the
    index hashes whole values instead (else every probe of those hashes would scan a long bucket)."""
    n = 20_000
    sampled = set(np.linspace(0, n - 1, min(n, equality._WORD_SAMPLE)).astype(np.int64).tolist())
    group, label = 0, []
    for i in range(n):  # word 1 is new at each sampled key and repeats until the next one
        group += i in sampled
        label.append(group)
    keys = [f"prefix00{label[i]:08d}samesame{i:08d}" for i in range(n)]
    assert len(set(keys)) == n
    assert equality._telling_words(equality._encode(arr(keys, pa.string()))) == (1,)  # on the sample
    s = EqualityDeleteSet([arr(keys, pa.string())])
    assert index_of(s)._words is None
    data = keys[::7] + [k[:-1] + "x" for k in keys[:50]]
    assert s.matches([arr(data, pa.string())]).tolist() == model([keys], [data])


def test_hash_of_some_words_does_not_depend_on_the_batch() -> None:
    rng = np.random.default_rng(4)
    values = random_bytes(rng, 400, [0, 5, 8, 16, 23, 40, 72, 300])
    for words in [(0,), (1,), (2, 4), (0, 1, 2), (8,), (31,)]:
        singles = [int(equality._hash_bytes(arr([v], pa.binary()), words)[0]) for v in values]
        assert equality._hash_bytes(arr(values, pa.large_binary()), words).tolist() == singles
        for length in (23, 72):
            same = [v for v in values if len(v) == length]
            picked = [h for h, v in zip(singles, values, strict=True) if len(v) == length]
            assert equality._hash_bytes(arr(same, pa.binary()), words).tolist() == picked
            chunked = pa.chunked_array([arr(same[:7], pa.binary()), arr(same[7:], pa.binary())])
            assert equality._hash_bytes(chunked, words).tolist() == picked


def test_two_column_keys_with_a_long_string_column(hash_mask: int | None) -> None:
    rng = np.random.default_rng(8)
    pool = [*notes(range(60)), None]
    ints = [None, 0, 1, 2**40]
    key_rows = [(ints[int(rng.integers(0, 4))], pool[int(rng.integers(0, 61))]) for _ in range(300)]
    data_rows = [(ints[int(rng.integers(0, 4))], pool[int(rng.integers(0, 61))]) for _ in range(900)]
    keys = [[r[0] for r in key_rows], [r[1] for r in key_rows]]
    data = [[r[0] for r in data_rows], [r[1] for r in data_rows]]
    s = EqualityDeleteSet([arr(keys[0], pa.int64()), arr(keys[1], pa.string())])
    if hash_mask is None:
        assert index_of(s)._words is not None and index_of(s)._words[1] is not None
    got = s.matches([arr(data[0], pa.int64()), arr(data[1], pa.large_string())]).tolist()
    expected = model(keys, data)
    assert got == expected and any(expected) and not all(expected)


# --- keys kept in their chunks (one per delete file) --------------------------------------------


def test_string_keys_in_many_chunks_with_duplicates_and_nulls(hash_mask: int | None) -> None:
    rng = np.random.default_rng(21)
    pool = notes(range(400))
    chunks = [[pool[int(i)] for i in rng.integers(0, 300, int(k))] for k in (50, 0, 120, 1, 200)]
    chunks[2][5] = None
    keys = pa.chunked_array([arr(c, pa.large_string()) for c in chunks])
    flat = [v for c in chunks for v in c]
    data = [*pool, None, "comment-"]
    expected = model([flat], [data])
    s = EqualityDeleteSet([keys])
    assert s.matches([arr(data, pa.string())]).tolist() == expected
    distinct = len(set(flat))
    assert hash_mask is not None or len(index_of(s)._hashes) == distinct  # stored once
    # short keys (whole values hashed) in chunks too, and rows taken across chunks in any order
    short = pa.chunked_array([arr(["a", "b", None], pa.string()), arr(["c", "a"], pa.string())])
    assert match([short], [arr(["c", "x", None, "a", "b"], pa.string())]) == [True, False, True, True, True]
    rows = np.array([4, 0, 3, 2, 1, 3], dtype=np.int64)
    assert equality._take(short, rows).to_pylist() == ["a", "a", "c", None, "b", "c"]


# --- dense integers: built without sorting ------------------------------------------------------


def test_dense_ints_with_duplicates_nulls_and_far_values() -> None:
    lo, hi = -(2**63), 2**63 - 1
    keys: list[Any] = [5, 9, 5, 7, None, 1_000, 9, 1_000]
    s = EqualityDeleteSet([arr(keys, pa.int64())])
    assert s._mode == "dense"
    data: list[Any] = [4, 5, 6, 7, 8, 9, 10, 999, 1_000, 1_001, None, lo, hi, -5, lo + 5, hi - 994]
    assert s.matches([arr(data, pa.int64())]).tolist() == model([keys], [data])
    # in chunks (one per delete file), one of them all NULL, one empty: the same set
    chunked = pa.chunked_array(
        [arr(keys[:3], pa.int64()), arr([], pa.int64()), arr([None], pa.int64()), arr(keys[3:], pa.int64())]
    )
    c = EqualityDeleteSet([chunked])
    assert c._mode == "dense"
    assert c.matches([arr(data, pa.int64())]).tolist() == model([keys], [data])
    no_nulls = pa.chunked_array([arr([7, 9], pa.int32()), arr([8], pa.int32())])
    assert match([no_nulls], [arr([None, 6, 7, 8, 9, 10], pa.int32())]) == [
        False,
        False,
        True,
        True,
        True,
        False,
    ]
    # keys at the top of the range: values far below must not wrap onto a key
    top = [hi - 3, hi - 1, hi]
    t = EqualityDeleteSet([arr(top, pa.int64())])
    assert t._mode == "dense"
    probe = [hi, hi - 1, hi - 2, lo, lo + 1, lo + 2, 0, -1]
    assert t.matches([arr(probe, pa.int64())]).tolist() == model([top], [probe])
    bottom = [lo, lo + 2]
    b = EqualityDeleteSet([arr(bottom, pa.int64())])
    probe = [lo, lo + 1, lo + 2, hi, hi - 1, 0]
    assert b.matches([arr(probe, pa.int64())]).tolist() == model([bottom], [probe])


# --- reading a data file: probe batches, key-only columns, the verdict ---------------------------


def test_read_with_overlapping_equality_sets_in_small_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three equality-id sets deleting overlapping rows, probed 4 rows at a time, the key columns
    not projected: rows and the recorded verdict (every position an equality delete removes, sorted,
    once) against a plain Python model; the second read applies the verdict instead of probing."""
    from delete_files import equality_delete_file, field, position_delete_file, write
    from pyiceberg.expressions import GreaterThanOrEqual
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icemor.io import read_verdicts, reader
    from icemor.io.cache import DELETE_CACHE
    from icemor.spec.files import DataFileRef
    from icemor.spec.tasks import FileScanTask

    n = 50
    cats = ["a", "b", None, "c"]
    rows = [{"id": i, "category": cats[i % 4], "name": notes([i % 17])[0]} for i in range(n)]
    schema = pa.schema(
        [
            field("id", pa.int64(), 1, nullable=False),
            field("category", pa.string(), 2),
            field("name", pa.string(), 3),
        ]
    )
    path = write(tmp_path / "data.parquet", pa.Table.from_pylist(rows, schema=schema), row_group_size=20)
    data = DataFileRef(
        path=path,
        file_format="PARQUET",
        record_count=n,
        file_size_in_bytes=os.path.getsize(path),
        spec_id=0,
        partition=(),
        data_sequence_number=1,
    )
    by_cat = equality_delete_file(tmp_path, "cat.parquet", {"category": (pa.string(), 2, ["a", None])})
    by_id = equality_delete_file(tmp_path, "id.parquet", {"id": (pa.int64(), 1, [0, 1, 2, 4, 8, 33, 49, 77])})
    by_name = equality_delete_file(
        tmp_path, "name.parquet", {"name": (pa.string(), 3, notes([3, 4, 16, 99]))}
    )
    pos = position_delete_file(tmp_path, "pos.parquet", [(path, p) for p in (5, 6, 8, 40)])
    task = FileScanTask(data, (pos, by_cat, by_id, by_name), 0, data.file_size_in_bytes)

    id_f = NestedField(1, "id", LongType(), required=True)
    table_schema = Schema(
        id_f, NestedField(2, "category", StringType()), NestedField(3, "name", StringType())
    )
    opts = reader.ReadOptions(
        schema=table_schema,
        projected_schema=Schema(id_f),
        row_filter=GreaterThanOrEqual("id", 3),
        field_types={1: LongType(), 2: StringType(), 3: StringType()},
    )
    by_eq = [
        i
        for i, r in enumerate(rows)
        if r["category"] in ("a", None)
        or r["id"] in (0, 1, 2, 4, 8, 33, 49, 77)
        or r["name"] in notes([3, 4, 16])
    ]
    live = [r["id"] for i, r in enumerate(rows) if i not in by_eq and i not in (5, 6, 8, 40) and r["id"] >= 3]
    assert by_eq and live

    monkeypatch.setattr(reader, "PROBE_BATCH_ROWS", 4)
    io = PyArrowFileIO()
    key = read_verdicts.verdict_key(task)
    assert DELETE_CACHE.peek(read_verdicts.VERDICT, key) is None
    got = list(reader.read_task(io, task, opts))
    assert max(b.num_rows for b in got) <= 4
    assert all(b.schema.names == ["id"] for b in got)
    assert [v for b in got for v in b.column(0).to_pylist()] == live
    assert DELETE_CACHE.peek(read_verdicts.VERDICT, key).tolist() == by_eq

    def no_probe(*_: Any, **__: Any) -> Any:
        raise AssertionError("equality deletes probed again")

    monkeypatch.setattr(reader, "equality_delete_sets", no_probe)
    again = [v for b in reader.read_task(io, task, opts) for v in b.column(0).to_pylist()]
    assert again == live
