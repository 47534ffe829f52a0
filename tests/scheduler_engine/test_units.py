"""Quantity and duration parsing: the one place scenario strings become internal units."""
from __future__ import annotations

import pytest

from scheduler_engine.units import (
    MAX_QUANTITY,
    UnitError,
    format_cpu,
    format_duration,
    parse_cpu,
    parse_duration,
    parse_gpu,
    parse_memory,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("value", "millicores"),
    [
        ("500m", 500.0),
        ("2", 2000.0),
        (2, 2000.0),
        (0.5, 500.0),
        ("0.5", 500.0),
        ("1e3", 1_000_000.0),
        ("64000m", 64000.0),
        ("7m", 7.0),
        (0.007, 7.0),  # decimal arithmetic: not 7.000000000000001
        ("0", 0.0),
        ("+3", 3000.0),
        (" 250m ", 250.0),
        ("1k", 1_000_000.0),
    ],
)
def test_parse_cpu_to_millicores(value, millicores):
    assert parse_cpu(value) == millicores


@pytest.mark.parametrize(
    ("value", "num_bytes"),
    [
        ("4Gi", 4 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1Ki", 1024),
        ("1500M", 1.5e9),
        ("16G", 16e9),
        ("1e3", 1000.0),
        (20000000000, 2e10),
        ("1Ti", 2**40),
        ("1Ei", 2**60),
    ],
)
def test_parse_memory_to_bytes(value, num_bytes):
    assert parse_memory(value) == num_bytes


def test_parse_gpu_keeps_fractions():
    assert parse_gpu(0.5) == 0.5
    assert parse_gpu(8) == 8.0
    assert parse_gpu("2") == 2.0


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("abc", "not a Kubernetes quantity"),
        ("5x", "not a Kubernetes quantity"),
        ("", "not a Kubernetes quantity"),
        ("4 Gi", "not a Kubernetes quantity"),
        ("-1", "must be >= 0"),
        (-0.5, "must be >= 0"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (True, "must be a number"),
        (None, "must be a number"),
        ([1], "must be a number"),
        ("1e30", "too large"),
        ("1e999999999", "too large"),
        ("1e9999999999", "too large"),
        (1e300, "too large"),
    ],
)
def test_parse_cpu_rejects(value, fragment):
    with pytest.raises(UnitError, match=fragment):
        parse_cpu(value)


def test_memory_limit_is_eight_exbibytes():
    assert parse_memory(str(int(MAX_QUANTITY))) == MAX_QUANTITY
    with pytest.raises(UnitError, match="too large"):
        parse_memory("9Ei")


def test_negative_allowed_only_when_asked():
    assert parse_quantity("-1", allow_negative=True) == -1.0
    assert parse_cpu("-500m", allow_negative=True) == -500.0
    with pytest.raises(UnitError):
        parse_quantity("-1")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("0s", 0.0),
        (45, 45.0),
        (2.5, 2.5),
        ("120", 120.0),
    ],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


def test_negative_duration_only_where_allowed():
    assert parse_duration("-1s", allow_negative=True) == -1.0
    assert parse_duration(-30, allow_negative=True) == -30.0
    with pytest.raises(UnitError, match=">= 0"):
        parse_duration("-1s")


@pytest.mark.parametrize("value", ["1y", "s", "1 h", "h1", "--1s", float("nan"), True, None, "1e9d"])
def test_parse_duration_rejects(value):
    with pytest.raises(UnitError):
        parse_duration(value)


@pytest.mark.parametrize("millicores", [0.0, 7.0, 500.0, 64000.0, 0.5, 1e-7, 123456789.0])
def test_format_cpu_round_trips(millicores):
    assert parse_cpu(format_cpu(millicores)) == millicores


@pytest.mark.parametrize("seconds", [0.0, 90.0, -1.0, 0.25, 86400.0])
def test_format_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds), allow_negative=True) == seconds
