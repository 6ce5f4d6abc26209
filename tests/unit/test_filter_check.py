"""`check_filter`: the consumers' check of a subscription before any I/O. It refuses what the parser
refuses, plus the forms the parser takes on purpose that RocketMQ's broker cannot compile
(`thrust._codec.filter`'s deviations); the forms both grammars read alike pass."""

from __future__ import annotations

import pytest

from thrust._codec.filter import FilterKind, InvalidFilter, check_filter, compile_filter
from thrust._codec.status import Code


@pytest.mark.parametrize(
    "expression",
    [
        "a > 1",
        "NOT (a > 1)",
        "a NOT IN ('x')",
        "a NOT BETWEEN 1 AND 2",
        "a IS NOT NULL",
        "NOT a = 'x'",
        "NOT a",
        "NOT a CONTAINS 'x'",
        "a = 1 AND NOT (b < 2)",
        "price > 10 AND region IN ('eu', 'us')",
        "x > 0.5",
        "a <> 1",
        "x = -1",
    ],
)
def test_forms_both_grammars_compile_pass(expression: str) -> None:
    check_filter(FilterKind.SQL, expression)


@pytest.mark.parametrize(
    ("expression", "position"),
    [
        ("NOT a > 1", 0),
        ("NOT a BETWEEN 1 AND 2", 0),
        ("NOT a IN ('x')", 0),
        ("NOT a NOT IN ('x')", 0),
        ("a = 1 OR NOT -b <= 2", 9),
        ("NOT NOT a >= 1", 0),
        ("NOT (a) > 1", 0),
        ("a != 1", 2),
        ("a > 0.0", 4),
        ("a > .0e5", 4),
    ],
)
def test_forms_only_thrusts_parser_takes_are_refused(expression: str, position: int) -> None:
    compile_filter(FilterKind.SQL, expression)  # the embedded server still takes them
    with pytest.raises(InvalidFilter) as info:
        check_filter(FilterKind.SQL, expression)
    assert info.value.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert info.value.position == position


def test_a_malformed_one_is_the_parsers_error_and_tags_are_not_sql() -> None:
    with pytest.raises(InvalidFilter):
        check_filter(FilterKind.SQL, "a >")
    check_filter(FilterKind.TAG, "a != 1 > 0.0")  # a tag expression, whatever it reads like
