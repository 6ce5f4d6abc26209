from __future__ import annotations

import pytest

from thrust._codec.filter import (
    MATCH_ALL,
    MAX_NESTING,
    FilterKind,
    InvalidFilter,
    MessageFilter,
    compile_filter,
)
from thrust._codec.status import Code
from thrust._codec.validation import Invalid


def sql(expression: str) -> MessageFilter:
    return compile_filter(FilterKind.SQL, expression)


def match(expression: str, props: dict[str, str] | None = None, tag: str | None = None) -> bool:
    return sql(expression).matches(tag, props or {})


def invalid(expression: str) -> InvalidFilter:
    with pytest.raises(Invalid) as info:
        sql(expression)
    assert info.value.code is Code.ILLEGAL_FILTER_EXPRESSION
    assert isinstance(info.value, InvalidFilter)
    return info.value


# -- enum / interface ------------------------------------------------------------------------------


def test_filter_kind_values_follow_proto() -> None:
    assert FilterKind.TAG == 1
    assert FilterKind.SQL == 2


def test_match_all_matches_everything() -> None:
    assert isinstance(MATCH_ALL, MessageFilter)
    assert MATCH_ALL.matches(None, {})
    assert MATCH_ALL.matches("x", {"a": "b"})


# -- TAG -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["*", "", "  ", " * "])
def test_tag_match_all(expression: str) -> None:
    f = compile_filter(FilterKind.TAG, expression)
    assert f is MATCH_ALL
    assert f.matches(None, {})
    assert f.matches("any", {})


def test_tag_single() -> None:
    f = compile_filter(FilterKind.TAG, "TagA")
    assert f.matches("TagA", {})
    assert not f.matches("TagB", {})
    assert not f.matches("taga", {})  # case-sensitive
    assert not f.matches(None, {})
    assert not f.matches("", {})


def test_tag_set_with_whitespace() -> None:
    f = compile_filter(FilterKind.TAG, " a || b||c ")
    assert all(f.matches(t, {}) for t in ("a", "b", "c"))
    assert not f.matches("d", {})
    assert not f.matches(None, {})
    assert not f.matches(" a ", {})


def test_tag_blank_parts_are_dropped() -> None:
    f = compile_filter(FilterKind.TAG, "a|| ||b||")
    assert f.matches("a", {}) and f.matches("b", {})
    assert not f.matches("", {})


def test_tag_only_separators_matches_nothing() -> None:
    f = compile_filter(FilterKind.TAG, "||")
    assert not f.matches("a", {})
    assert not f.matches(None, {})


def test_tag_star_inside_a_set_is_literal() -> None:
    f = compile_filter(FilterKind.TAG, "a||*")
    assert f.matches("a", {})
    assert f.matches("*", {})
    assert not f.matches("b", {})
    assert not f.matches(None, {})


def test_tag_triple_pipe_like_java_split() -> None:
    f = compile_filter(FilterKind.TAG, "a|||b")
    assert f.matches("a", {})
    assert f.matches("|b", {})
    assert not f.matches("b", {})


def test_tag_ignores_properties() -> None:
    assert not compile_filter(FilterKind.TAG, "a").matches("b", {"TAGS": "a"})


def test_unspecified_kind_is_tag() -> None:
    assert compile_filter(0, "a").matches("a", {})
    assert compile_filter(0, "").matches(None, {})


def test_repr_mentions_kind() -> None:
    assert "TAG" in repr(compile_filter(FilterKind.TAG, "a"))
    assert "SQL" in repr(sql("a = 'b'"))


# -- SQL: basic comparisons ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a = 'x'", {"a": "x"}, True),
        ("a = 'x'", {"a": "y"}, False),
        ("a = 'x'", {}, False),
        ("'x' = a", {"a": "x"}, True),
        ("a <> 'x'", {"a": "y"}, True),
        ("a <> 'x'", {"a": "x"}, False),
        ("a <> 'x'", {}, False),
        ("a != 'x'", {"a": "y"}, True),
        ("a != 'x'", {"a": "x"}, False),
        ("a = b", {"a": "1", "b": "1"}, True),
        ("a = b", {"a": "1", "b": "2"}, False),
        ("a = b", {"a": "1"}, False),
        ("a = b", {}, False),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = ''", {"a": ""}, True),
        ("a = ''", {}, False),
        ("a = 'X'", {"a": "x"}, False),
        ("a = 'héllo wörld'", {"a": "héllo wörld"}, True),
        ("a = 'a--b'", {"a": "a--b"}, True),
        ("a = '/*x*/'", {"a": "/*x*/"}, True),
    ],
)
def test_string_equality(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props) is expected


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a > 5", {"a": "6"}, True),
        ("a > 5", {"a": "5"}, False),
        ("a >= 5", {"a": "5"}, True),
        ("a < 5", {"a": "4"}, True),
        ("a < 5", {"a": "-10"}, True),
        ("a <= 5", {"a": "5"}, True),
        ("a <= 5", {"a": "6"}, False),
        ("a > 5", {}, False),
        ("5 < a", {"a": "6"}, True),
        ("a = 10", {"a": "10"}, True),
        ("a = 10", {"a": "+10"}, True),
        ("a = 10", {"a": "010"}, True),
        ("a = 10L", {"a": "10"}, True),
        ("a = 10", {"a": "11"}, False),
        ("a <> 10", {"a": "11"}, True),
        ("a > 1.5", {"a": "1.6"}, True),
        ("a > 1.5", {"a": "2"}, True),
        ("a < 1.5", {"a": "1.4"}, True),
        ("a = 1.0", {"a": "1"}, True),
        ("a = 1.5", {"a": " 1.5 "}, True),
        ("a = 2.5", {"a": "2.5d"}, True),
        ("a > 1e3", {"a": "1001"}, True),
        ("a < 1E3", {"a": "999.5"}, True),
        ("a > .5", {"a": "0.6"}, True),
        ("a > 5.", {"a": "5.1"}, True),
        ("a > -5", {"a": "-4"}, True),
        ("a > - 5", {"a": "-6"}, False),
        ("a < +5", {"a": "4"}, True),
        ("a > 0.0", {"a": "0.1"}, True),
        ("a > 9223372036854775807", {"a": "1"}, False),
        ("a = 9223372036854775807", {"a": "9223372036854775807"}, True),
        # Property against property: both are parsed as doubles for ordering.
        ("a > b", {"a": "10", "b": "9"}, True),
        ("a > b", {"a": "9", "b": "10"}, False),
        ("a > b", {"a": "x", "b": "10"}, False),
    ],
)
def test_numeric_comparisons(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props) is expected


@pytest.mark.parametrize(
    ("expression", "props"),
    [
        # Integer literal: the property must parse as a Java long.
        ("a = 5", {"a": "abc"}),
        ("a = 5", {"a": "5.0"}),
        ("a > 5", {"a": "5.5"}),
        ("a > 5", {"a": ""}),
        ("a > 5", {"a": "1_000"}),
        ("a > 5", {"a": "99999999999999999999"}),
        # Decimal literal: the property must parse as a Java double.
        ("a > 1.0", {"a": "abc"}),
        ("a > 1.0", {"a": "1,5"}),
    ],
)
def test_unconvertible_property_is_unknown(expression: str, props: dict[str, str]) -> None:
    assert not match(expression, props)
    # Unknown, not false: the negation does not match either.
    assert not match(f"NOT ({expression})", props)


def test_unconvertible_comparison_does_not_poison_or() -> None:
    assert match("a > 5 OR b = 'y'", {"a": "abc", "b": "y"})


def test_boolean_literal_comparisons() -> None:
    assert match("a = TRUE", {"a": "true"})
    assert match("a = TRUE", {"a": "TRUE"})
    assert not match("a = TRUE", {"a": "yes"})
    assert match("a = FALSE", {"a": "no"})  # Boolean.valueOf: anything but "true" is false
    assert match("a <> TRUE", {"a": "false"})
    assert not match("a = TRUE", {})


def test_boolean_expression_equality() -> None:
    assert match("(a = 'x') = TRUE", {"a": "x"})
    assert match("(a = 'x') = FALSE", {"a": "y"})
    assert not match("(a = 'x') = TRUE", {})
    assert match("(a = 'x') = (b = 'y')", {"a": "x", "b": "y"})
    assert match("(a = 'x') <> (b = 'y')", {"a": "x", "b": "z"})


def test_constant_comparisons() -> None:
    assert match("1 = 1")
    assert not match("1 = 2")
    assert match("'a' = 'a'")
    assert match("1 = 1.0")
    assert match("TRUE = TRUE")
    assert not match("TRUE = FALSE")
    assert match("2 > 1")


def test_literal_forms() -> None:
    assert match("TRUE")
    assert not match("FALSE")
    assert not match("NULL")
    assert match("true")
    assert match("(TRUE)")


# -- SQL: NULL handling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a IS NULL", {}, True),
        ("a IS NULL", {"a": ""}, False),
        ("a IS NULL", {"a": "x"}, False),
        ("a IS NOT NULL", {"a": "x"}, True),
        ("a IS NOT NULL", {"a": ""}, True),
        ("a IS NOT NULL", {}, False),
        ("a is not null", {"a": "1"}, True),
        ("(a = 'x') IS NULL", {}, True),
        ("(a = 'x') IS NULL", {"a": "y"}, False),
        ("a IS NULL AND b IS NOT NULL", {"b": "1"}, True),
        ("a IS NULL OR a = 'x'", {}, True),
        ("a IS NULL OR a = 'x'", {"a": "x"}, True),
        ("a IS NULL OR a = 'x'", {"a": "y"}, False),
    ],
)
def test_null_checks(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props) is expected


def test_three_valued_logic() -> None:
    # unknown OR true = true; unknown AND false = false; NOT unknown = unknown.
    assert match("a = 'x' OR b = 'y'", {"b": "y"})
    assert not match("a = 'x' OR b = 'y'", {"b": "z"})
    assert not match("a = 'x' AND b = 'y'", {"b": "y"})
    assert match("NOT (a = 'x' AND b = 'y')", {"b": "z"})  # unknown AND false = false
    assert not match("NOT (a = 'x' AND b = 'y')", {"b": "y"})  # unknown AND true = unknown
    assert not match("NOT (a = 'x')", {})
    assert not match("NOT (a <> 'x')", {})
    assert not match("NOT (a = 'x' OR b = 'y')", {"b": "z"})  # unknown OR false = unknown
    assert match("NOT (a = 'x' OR b = 'y')", {"a": "q", "b": "z"})


def test_null_literal_in_logic() -> None:
    assert match("NULL OR TRUE")
    assert not match("NULL OR FALSE")
    assert not match("NOT (NULL OR FALSE)")
    assert not match("NULL AND TRUE")
    assert match("NOT (NULL AND FALSE)")


def test_property_as_condition_is_boolean_cast() -> None:
    # UnaryExpression.createBooleanCast: strings are FALSE, missing is NULL.
    assert not match("a", {"a": "true"})
    assert match("NOT a", {"a": "true"})
    assert not match("NOT a", {})
    assert match("a OR TRUE", {})
    assert match("TRUE AND NOT a", {"a": "x"})


# -- SQL: TAGS ---------------------------------------------------------------------------------------


def test_tags_identifier_is_the_tag() -> None:
    assert match("TAGS = 'TagA'", {}, tag="TagA")
    assert not match("TAGS = 'TagA'", {}, tag="TagB")
    assert match("TAGS IS NULL", {}, tag=None)
    assert match("TAGS IN ('a', 'b')", {}, tag="b")
    assert match("TAGS = 'a' AND k = 'v'", {"k": "v"}, tag="a")


def test_tags_is_case_sensitive_identifier() -> None:
    # Only `TAGS` names the tag; `tags` is an ordinary user property.
    assert match("tags = 'x'", {"tags": "x"}, tag="y")
    assert not match("tags = 'y'", {"tags": "x"}, tag="y")


def test_tags_wins_over_a_user_property_named_tags() -> None:
    assert match("TAGS = 'real'", {"TAGS": "fake"}, tag="real")


def test_identifiers_are_case_sensitive() -> None:
    assert match("Region = 'eu'", {"Region": "eu"})
    assert not match("region = 'eu'", {"Region": "eu"})


def test_identifier_characters() -> None:
    assert match("_a$1 = 'x'", {"_a$1": "x"})
    assert match("$a = 'x'", {"$a": "x"})


# -- SQL: IN / BETWEEN / string operators -------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a IN ('x', 'y', 'z')", {"a": "y"}, True),
        ("a IN ('x', 'y', 'z')", {"a": "w"}, False),
        ("a IN ('x')", {"a": "x"}, True),
        ("a IN ('x','y','z','p','q','r')", {"a": "r"}, True),
        ("a IN ('x', 'y')", {}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {"a": "x"}, False),
        ("a NOT IN ('x', 'y')", {}, False),
        ("a in ('1', '2')", {"a": "1"}, True),
        ("a IN ('1')", {"a": "1.0"}, False),  # string membership, no numeric conversion
        ("(a) IN ('x')", {"a": "x"}, True),
        ("a IN ('it''s')", {"a": "it's"}, True),
        ("NOT a IN ('x')", {"a": "y"}, True),
        ("NOT a IN ('x')", {"a": "x"}, False),
    ],
)
def test_in(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props) is expected


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a BETWEEN 1 AND 5", {"a": "1"}, True),
        ("a BETWEEN 1 AND 5", {"a": "3"}, True),
        ("a BETWEEN 1 AND 5", {"a": "5"}, True),
        ("a BETWEEN 1 AND 5", {"a": "0"}, False),
        ("a BETWEEN 1 AND 5", {"a": "6"}, False),
        ("a BETWEEN 1 AND 5", {}, False),
        ("a BETWEEN 1 AND 5", {"a": "x"}, False),
        ("a BETWEEN 1 AND 1", {"a": "1"}, True),
        ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, True),
        ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
        ("a NOT BETWEEN 1 AND 5", {"a": "0"}, True),
        ("a NOT BETWEEN 1 AND 5", {"a": "6"}, True),
        ("a NOT BETWEEN 1 AND 5", {"a": "3"}, False),
        ("a NOT BETWEEN 1 AND 5", {}, False),
        ("a BETWEEN b AND c", {"a": "2", "b": "1", "c": "3"}, True),
        ("a BETWEEN b AND c", {"a": "2", "c": "3"}, False),
        # b missing: `a < b` is unknown and `a > c` is false, so the OR is unknown.
        ("a NOT BETWEEN b AND c", {"a": "0", "c": "3"}, False),
        ("a NOT BETWEEN b AND c", {"a": "9", "c": "3"}, True),
        ("a BETWEEN 1 AND 5 AND b = 'x'", {"a": "3", "b": "x"}, True),
        ("a BETWEEN 1 AND 5 AND b = 'x'", {"a": "3", "b": "y"}, False),
        ("a BETWEEN 1 AND 5 OR b = 'x'", {"a": "9", "b": "x"}, True),
        ("a between 1 and 5", {"a": "2"}, True),
    ],
)
def test_between(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props) is expected


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        ("a CONTAINS 'ell'", {"a": "hello"}, True),
        ("a CONTAINS 'xyz'", {"a": "hello"}, False),
        ("a CONTAINS 'ell'", {}, False),
        ("a NOT CONTAINS 'ell'", {"a": "hello"}, False),
        ("a NOT CONTAINS 'xyz'", {"a": "hello"}, True),
        ("a NOT CONTAINS 'xyz'", {}, False),
        ("NOT (a CONTAINS 'xyz')", {}, True),  # a missing property is FALSE here, not unknown
        ("a CONTAINS ''", {"a": "hello"}, False),
        ("a NOT CONTAINS ''", {"a": "hello"}, False),
        ("a STARTSWITH 'he'", {"a": "hello"}, True),
        ("a STARTSWITH 'lo'", {"a": "hello"}, False),
        ("a NOT STARTSWITH 'lo'", {"a": "hello"}, True),
        ("a ENDSWITH 'lo'", {"a": "hello"}, True),
        ("a ENDSWITH 'he'", {"a": "hello"}, False),
        ("a NOT ENDSWITH 'he'", {"a": "hello"}, True),
        ("a startswith 'h' and a endswith 'o'", {"a": "hello"}, True),
        ("TAGS STARTSWITH 'order'", {}, True),
    ],
)
def test_string_operators(expression: str, props: dict[str, str], expected: bool) -> None:
    assert match(expression, props, tag="order-created") is expected


# -- SQL: precedence and structure -------------------------------------------------------------------


def test_and_binds_tighter_than_or() -> None:
    # a OR (b AND c)
    assert match("a = '1' OR b = '1' AND c = '1'", {"a": "1", "b": "0", "c": "0"})
    assert not match("(a = '1' OR b = '1') AND c = '1'", {"a": "1", "b": "0", "c": "0"})
    # (a AND b) OR c
    assert match("a = '1' AND b = '1' OR c = '1'", {"a": "0", "b": "0", "c": "1"})


def test_not_binds_tighter_than_and() -> None:
    # (NOT a) AND b
    assert match("NOT a = '1' AND b = '1'", {"a": "0", "b": "1"})
    assert not match("NOT a = '1' AND b = '1'", {"a": "0", "b": "0"})
    assert not match("NOT (a = '1' AND b = '1')", {"a": "1", "b": "1"})
    assert match("NOT (a = '1' AND b = '1')", {"a": "1", "b": "0"})


def test_not_binds_looser_than_comparison() -> None:
    assert match("NOT a = 'x'", {"a": "y"})
    assert not match("NOT a = 'x'", {"a": "x"})
    assert match("NOT a > 5", {"a": "3"})
    assert match("NOT a IS NULL", {"a": "x"})
    assert not match("NOT a IS NULL", {})


def test_double_not() -> None:
    assert match("NOT NOT a = 'x'", {"a": "x"})
    assert not match("NOT NOT NOT a = 'x'", {"a": "x"})


def test_nested_parentheses() -> None:
    expression = "((a = '1' OR (b = '2' AND (c = '3' OR d = '4'))) AND NOT (e IS NULL))"
    assert match(expression, {"b": "2", "d": "4", "e": "x"})
    assert not match(expression, {"b": "2", "d": "4"})
    assert not match(expression, {"b": "2", "e": "x"})
    assert match(expression, {"a": "1", "e": "x"})


def test_long_or_chain_does_not_recurse() -> None:
    expression = " OR ".join(f"a = '{i}'" for i in range(3000))
    f = sql(expression)
    assert f.matches(None, {"a": "2999"})
    assert not f.matches(None, {"a": "x"})


def test_long_and_chain() -> None:
    expression = " AND ".join(f"p{i} IS NOT NULL" for i in range(2000))
    props = {f"p{i}": "v" for i in range(2000)}
    assert match(expression, props)
    del props["p1999"]
    assert not match(expression, props)


def test_keywords_are_case_insensitive() -> None:
    assert match("a = 'x' aNd b = 'y' Or c Is NoT nUlL", {"a": "x", "b": "y"})
    assert match("a = 'x' and b = 'y' or c is not null", {"c": "1"})


def test_whitespace_and_comments() -> None:
    assert match("\ta\n=\r'x'\f", {"a": "x"})
    assert match("a = 'x' -- trailing comment", {"a": "x"})
    assert match("a = 'x' -- comment\nAND b = 'y'", {"a": "x", "b": "y"})
    assert match("/* leading */ a /* mid */ = 'x'", {"a": "x"})
    assert match("a=1", {"a": "1"})
    assert match("a<>1", {"a": "2"})


def test_operators_without_spaces() -> None:
    assert match("a>=1 AND b<=2", {"a": "1", "b": "2"})
    assert match("(a='x')OR(b='y')", {"b": "y"})
    assert match("a IN('x','y')", {"a": "x"})


def test_filter_is_reusable_and_stateless() -> None:
    f = sql("a > 5")
    for i in range(20):
        assert f.matches(None, {"a": str(i)}) is (i > 5)


# -- SQL: errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "position"),
    [
        ("", 0),
        ("   ", 0),
        ("-- only a comment", 0),
        ("a = ", 4),
        ("a =", 3),
        ("= 'x'", 0),
        ("a = 'x' AND", 11),
        ("a = 'x' OR OR b = 'y'", 11),
        ("(a = 'x'", 8),
        ("a = 'x')", 7),
        ("a = 'x", 4),
        ("a = 'x' b = 'y'", 8),
        ("a == 'x'", 3),
        ('a = "x"', 4),
        ("a = 'x' && b = 'y'", 8),
        ("a IS 'x'", 5),
        ("a IS NOT 'x'", 9),
        ("a IN 'x'", 5),
        ("a IN ()", 6),
        ("a IN ('x',)", 10),
        ("a IN ('x' 'y')", 10),
        ("a IN (1, 2)", 6),
        ("a BETWEEN 1", 11),
        ("a BETWEEN 1 OR 2", 12),
        ("a CONTAINS b", 11),
        ("a NOT LIKE 'x'", 2),
        ("a LIKE 'x'", 2),
        ("a = 'x' /* unterminated", 8),
        ("a # 1", 2),
        ("a = 007", 5),
        ("5abc = 1", 1),
        ("a = 99999999999999999999", 4),
        ("a > 1e400", 4),
    ],
)
def test_syntax_errors(expression: str, position: int) -> None:
    error = invalid(expression)
    assert error.position == position, error.message
    assert "offset" in error.message


@pytest.mark.parametrize(
    "expression",
    [
        # Not a boolean expression.
        "a = 'x' AND 1",
        "'x'",
        "1",
        "1.5",
        "-a",
        "NOT 'x'",
        "a OR 5",
        # Ordering needs numbers.
        "a > 'x'",
        "'x' < a",
        "a > TRUE",
        "a < NULL",
        "(a = 'x') > 1",
        "a > (b = 'y')",
        "a BETWEEN 'a' AND 'z'",
        "a BETWEEN 1 AND 'z'",
        "a NOT BETWEEN 'a' AND 'z'",
        "a BETWEEN 5 AND 1",
        "a BETWEEN 1 AND NULL",
        # NULL is compared with IS NULL only.
        "a = NULL",
        "NULL = a",
        "a <> NULL",
        # Boolean literal on the left against a non-boolean literal.
        "TRUE = 1",
        # IN needs a property.
        "'x' IN ('x')",
        "(a = 'x') IN ('x')",
    ],
)
def test_semantic_errors(expression: str) -> None:
    error = invalid(expression)
    assert error.position is not None
    assert expression in error.message


def test_between_descending_not_between_is_allowed() -> None:
    # Upstream only checks the bounds' order for BETWEEN.
    assert match("a NOT BETWEEN 5 AND 1", {"a": "3"})


def test_nesting_limit() -> None:
    ok = "(" * (MAX_NESTING - 1) + "a = 'x'" + ")" * (MAX_NESTING - 1)
    assert match(ok, {"a": "x"})
    too_deep = "(" * (MAX_NESTING + 1) + "a = 'x'" + ")" * (MAX_NESTING + 1)
    assert "nested" in invalid(too_deep).message
    assert "nested" in invalid("NOT " * (MAX_NESTING + 1) + "a = 'x'").message
    assert "nested" in invalid("a > " + "- " * (MAX_NESTING + 1) + "1").message
    # Pathologically deep input still fails cleanly rather than with RecursionError.
    invalid("(" * 100_000)


def test_error_message_is_truncated_for_long_expressions() -> None:
    error = invalid("a = 'x' AND " + "b = 'y' AND " * 1000)
    assert len(error.message) < 400


def test_invalid_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ILLEGAL_FILTER_EXPRESSION"):
        sql("a =")
