"""The shared input checks name the field and the value, and refuse bools and floats."""

from __future__ import annotations

import pytest

from heteroplan.errors import InputError, check_int, check_int_list, check_seconds


def test_check_int() -> None:
    assert check_int("n", 3, 1) == 3
    for bad in (0, True, 2.0, "3", None):
        with pytest.raises(InputError) as info:
            check_int("config.steps", bad, 1)
        assert info.value.field == "config.steps" and info.value.value == bad


def test_check_int_list_sorts_and_dedupes() -> None:
    assert check_int_list("sizes", [8, 2, 8, 4], 1) == (2, 4, 8)
    for bad in ([], 4, [1, 0], [1, True], [2.0], "12", None):
        with pytest.raises(InputError) as info:
            check_int_list("microbatch_sizes", bad, 1, "microbatch sizes")
        assert info.value.field == "microbatch_sizes"
        assert "microbatch sizes >= 1" in str(info.value)


def test_check_seconds() -> None:
    assert check_seconds("timeout_s", 2) == 2.0
    for bad in (0, -1.0, True, float("nan"), "5"):
        with pytest.raises(InputError, match="timeout_s"):
            check_seconds("timeout_s", bad)
