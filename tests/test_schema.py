"""heteroplan.schema, the one decoder of every file heteroplan reads: each spec's rule, the
paths and values its errors name, and that what it accepts comes out as the same plain data."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan import schema
from heteroplan.errors import ClusterError, InputError
from heteroplan.schema import (
    Flag,
    IntKey,
    Later,
    Nullable,
    Number,
    OneOf,
    Pair,
    Plain,
    Record,
    Seq,
    Table,
    Text,
    decode,
    shown,
)

REPLICA = Record({"gpu_type": Text()}, {"count": Number(low=1, high=100, integer=True, unit="replicas")})
DOC = Record({"stages": Seq(Record({"replicas": Seq(REPLICA, 1, 8)}), 1, 4)})


@pytest.mark.parametrize(("value", "path", "shown_value"), [
    ({"stages": [{"replicas": [{"gpu_type": "a", "count": 1e9}]}]}, "plan.stages[0].replicas[0].count", 1e9),
    ({"stages": [{"replicas": [{"gpu_type": "a", "count": 2.5}]}]}, "plan.stages[0].replicas[0].count", 2.5),
    ({"stages": [{"replicas": [{"gpu_type": "a", "count": True}]}]}, "plan.stages[0].replicas[0].count", True),
    ({"stages": [{"replicas": [{"gpu_type": "a", "count": math.nan}]}]}, "plan.stages[0].replicas[0].count", None),
    ({"stages": [{"replicas": [{"count": 1}]}]}, "plan.stages[0].replicas[0].gpu_type", None),
    ({"stages": [{"replicas": [{"gpu_type": "a", "cuont": 1}]}]}, "plan.stages[0].replicas[0].cuont", 1),
    ({"stages": [{"replicas": [{"gpu_type": "\x1b[2J"}]}]}, "plan.stages[0].replicas[0].gpu_type", "\x1b[2J"),
    ({"stages": [{"replicas": []}]}, "plan.stages[0].replicas", []),
    ({"stages": "all"}, "plan.stages", "all"),
])
def test_errors_name_the_path_and_the_value(value, path, shown_value) -> None:
    with pytest.raises(InputError) as err:
        decode(DOC, value, "plan")
    assert err.value.field == path
    if shown_value is not None:
        assert err.value.value == shown_value


def test_valid_data_comes_out_unchanged_with_whole_floats_as_ints() -> None:
    doc = {"stages": [{"replicas": [{"gpu_type": "a", "count": 8.0}, {"gpu_type": "b"}]}]}
    out = decode(DOC, doc, "plan")
    assert out == {"stages": [{"replicas": [{"gpu_type": "a", "count": 8}, {"gpu_type": "b"}]}]}
    assert type(out["stages"][0]["replicas"][0]["count"]) is int
    assert "count" not in out["stages"][0]["replicas"][1]  # absent optional keys stay absent (defaults apply)


@pytest.mark.parametrize(("spec", "good", "bad"), [
    (Number(above=0), [1e-300, 5], [0, -1, math.inf, "1", None]),
    (Number(low=0, high=10), [0, 10, 3.5], [-1e-9, 10.0001, math.nan]),
    (Number(integer=True, low=1), [1, 2.0, 10 ** 20], [1.5, True, 0]),
    (Number(numeral=True, low=0), ["1.5", "0", " 7 "], ["nan", "inf", "x", "", "9" * 400]),
    (Text(), ["a", "A100-40", "x" * 256], ["", "x" * 257, "a\nb", "\x1b[2J", "\u202etxt", 3, None]),
    (Text(choices=("fp32", "bf16")), ["bf16"], ["fp16", "", 1]),
    (Flag(), [True, False], [1, 0, "true", None]),
    (IntKey(1, 8), ["1", "8"], ["0", "9", "08", "1.0", "-1", " 1", "x"]),
    (Pair((Number(), Text())), [[1, "a"], (2, "b")], [[1], [1, "a", 2], "1a", {"0": 1}]),
    (Nullable(Number(low=0)), [None, 0], [-1, "None"]),
    (Table(Number(low=0), IntKey(1, 4), 1, 2), [{"1": 0}, {"1": 1, "4": 2}], [{}, {"5": 1}, {"1": 1, "2": 2, "3": 3}]),
    (Plain(max_depth=2), [{"a": [1, 2]}, "x", None, True], [[[[1]]], math.inf, {"a": {"b": {"c": 1}}}, 2 ** 70]),
])
def test_each_spec_accepts_its_values_and_refuses_the_others(spec, good, bad) -> None:
    for value in good:
        decode(spec, value, "x")
    for value in bad:
        with pytest.raises(InputError):
            decode(spec, value, "x")


def test_versions_pick_their_spec_and_refuse_unknown_ones() -> None:
    spec = schema.Versioned({1: Record({"a": Number()}), 2: Record({"b": Number()})})
    assert decode(spec, {"a": 1}) == {"a": 1}  # no key: version 1
    assert decode(spec, {"format_version": 2, "b": 1}) == {"format_version": 2, "b": 1}
    for version in (3, True, "2", None):
        with pytest.raises(InputError, match="format_version.*newer heteroplan"):
            decode(spec, {"format_version": version, "b": 1})
    with pytest.raises(InputError, match="b"):
        decode(spec, {"format_version": 2, "a": 1})


def test_check_names_the_field_and_value_of_a_rule_between_fields() -> None:
    """``check`` passes when its condition holds, else raises the InputError it describes."""
    schema.check(True, "stages[0].tp", 3, "must divide the heads")
    with pytest.raises(InputError) as err:
        schema.check(False, "stages[0].tp", 3, "must divide the heads")
    assert (err.value.field, err.value.value, err.value.reason) == ("stages[0].tp", 3, "must divide the heads")


def test_one_of_reports_the_error_of_the_spec_for_that_kind_of_value() -> None:
    spec = OneOf((Text(), Record({"name": Text()})))
    assert decode(spec, "z") == "z" and decode(spec, {"name": "z"}) == {"name": "z"}
    with pytest.raises(InputError) as err:
        decode(spec, {"name": 3}, "zones[0]")
    assert err.value.field == "zones[0].name"


def test_errors_take_the_callers_class_and_the_file_name() -> None:
    with pytest.raises(ClusterError):
        decode(Number(low=0), -1, "memory_gb", error=ClusterError)
    with pytest.raises(InputError) as err, schema.naming_file("/x/plan.json", "--plan"):
        decode(DOC, {"stages": []}, "plan")
    assert err.value.field == "/x/plan.json (--plan): plan.stages" and err.value.value == []


def test_long_values_are_shortened_in_errors() -> None:
    assert shown("x" * 10) == "x" * 10
    assert shown("x" * 200_000).endswith("(200,000 characters)") and len(shown("x" * 200_000)) < 100
    assert shown(list(range(100_000))) == "<list of 100,000 entries>"
    with pytest.raises(InputError) as err:
        decode(Text(), "y" * 131_073, "name")
    assert len(str(err.value)) < 200


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=20))
def test_any_data_decodes_or_is_an_input_error(value) -> None:
    """Nothing but InputError escapes a spec, whatever the data (the property behind every format's)."""
    for spec in (DOC, Plain(), Table(Seq(Number()), IntKey()), OneOf((Text(), Pair((Number(), Number()))))):
        try:
            decode(spec, value, "doc")
        except InputError:
            pass


def test_later_numbers_that_may_diverge_and_free_text() -> None:
    """``Later`` passes its value on untouched; ``Number(finite=False)`` keeps NaN and infinities
    (a diverged loss) but still refuses what is not a number; ``Text(printable=False)`` takes any
    characters within its lengths, and a Text without a real upper bound says "at least"."""
    marker = {"deep": [object()]}
    assert decode(Record({"a": Later()}), {"a": marker})["a"] is marker
    loss = Number(finite=False)
    assert math.isnan(decode(loss, math.nan)) and decode(loss, -math.inf) == -math.inf and decode(loss, 2) == 2
    for bad in ("nan", True, None, [1.0]):
        with pytest.raises(InputError):
            decode(loss, bad, "loss")
    with pytest.raises(InputError):
        decode(Number(finite=False, integer=True), math.inf)
    free = Text(max_len=10**12, printable=False)
    assert decode(free, "a\tb\x1b[2J") == "a\tb\x1b[2J"
    with pytest.raises(InputError, match="at least 1 characters"):
        decode(free, "", "job_id")
    with pytest.raises(InputError, match="printable"):
        decode(Text(), "a\tb")
