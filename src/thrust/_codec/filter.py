"""Message filtering: TAG expressions and RocketMQ's SQL92 dialect. The embedded server filters with it
(`thrust.server.service.port` compiles the subscriptions); the consumers compile their SQL92
subscriptions with it when they are built, so that a malformed one is refused before any I/O.

Why one module of ~900 lines (docs/CONVENTIONS.md): the tokenizer, the recursive-descent parser and the
closures it builds are one grammar sharing private token and value types; split, each part would only
reach into the others' internals (`check_filter`, the client's stricter check, reads the same tokens).

`compile_filter` turns a subscription's `FilterExpression` (docs/protocol.md §6.5) into a
`MessageFilter` once; the receive path then calls `matches(tag, properties)` per message.

TAG (upstream `FilterAPI.buildSubscriptionData`): `*` or an empty expression selects every message;
otherwise the expression is split on `||`, each part trimmed, blank parts dropped, and a message matches
when its tag is in that set. A message without a tag only matches `*`.

SQL92 follows `org.apache.rocketmq.filter` (its `SelectorParser.jj`, a trimmed ActiveMQ JMS selector
grammar, and the `ComparisonExpression` / `LogicExpression` / `UnaryExpression` semantics). The grammar
is parsed here by a hand-written tokenizer and recursive-descent parser into closures (no `eval`):

    or_expr     := and_expr (OR and_expr)*
    and_expr    := not_expr (AND not_expr)*
    not_expr    := NOT not_expr | equality
    equality    := comparison (('=' | '<>' | '!=') comparison | IS [NOT] NULL)*
    comparison  := unary (('>' | '>=' | '<' | '<=') unary
                          | [NOT] BETWEEN unary AND unary
                          | [NOT] IN '(' string (',' string)* ')'
                          | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string)*
    unary       := '+' unary | '-' unary | primary
    primary     := string | integer | decimal | TRUE | FALSE | NULL | identifier | '(' or_expr ')'

Keywords are case-insensitive; identifiers (`[A-Za-z_$][A-Za-z0-9_$]*`) are case-sensitive user
property names, and `TAGS` is the message tag (upstream evaluates against all message properties, where
the tag is stored under `TAGS`). Strings use single quotes with `''` as the escape; integers are Java
longs (an `L` suffix is allowed); decimals are doubles with an optional exponent. `--` line comments and
`/* */` block comments are skipped, as upstream.

Evaluation is SQL three-valued logic, as upstream: a missing property is NULL (unknown), comparisons
with NULL are unknown, `AND`/`OR`/`NOT` propagate unknown, and a message matches only when the whole
expression is TRUE. Upstream semantics kept on purpose:

- `=`/`<>`: equal strings are equal; a string compared with a number is parsed as a number (Java
  `Long.valueOf` for an integer literal, `Double.valueOf` for a decimal); a string compared with
  TRUE/FALSE is `"true"` (any case) or false.
- `<`, `<=`, `>`, `>=` and BETWEEN only accept numeric operands: a string/boolean literal there is a
  compile error; two property strings are both parsed as doubles.
- `IN` needs a property on its left and string literals inside; it compares strings exactly.
- `CONTAINS`/`STARTSWITH`/`ENDSWITH` (and their NOT forms) are FALSE, not unknown, for a missing
  property or an empty search string.
- `BETWEEN a AND b` with constant bounds requires `a <= b`; `= NULL` is a compile error (use IS NULL).
- A bare property used as a condition is a boolean cast, which is FALSE for any string value.

Deliberate deviations (upstream bugs or crashes, documented so nobody "fixes" them back; the server keeps
them, and `check_filter`, the consumers' check, refuses those the broker cannot compile):

- NOT binds looser than comparisons, as in standard SQL and the JMS spec: `NOT a = 'x'` is
  `NOT (a = 'x')`. Upstream's grammar binds NOT to the next operand, so there `NOT a = 'x'` compares a
  boolean with a string and never matches, `NOT a > 1` fails to compile and `NOT a IS NULL` means
  `a IS NULL`.
- A property value that cannot be converted for a comparison (e.g. `a > 5` with `a = 'abc'`) makes that
  comparison unknown. Upstream throws, which aborts the whole evaluation so the message never matches.
- Comparing with a missing property is unknown whichever side it is on (upstream answers FALSE when only
  the right operand is missing, and TRUE for `a = b` when both are).
- `!=` is accepted as a synonym of `<>`; a decimal literal `0.0` is accepted (upstream rejects decimals
  below `Double.MIN_VALUE`, including zero).
- Nesting (parentheses, NOT, unary signs) is limited to `MAX_NESTING` levels to bound recursion.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final, TypeAlias

from thrust._codec.status import Code
from thrust._codec.validation import Invalid

__all__ = [
    "MATCH_ALL",
    "MAX_NESTING",
    "TAG_PROPERTY",
    "FilterKind",
    "InvalidFilter",
    "MessageFilter",
    "check_filter",
    "compile_filter",
]


class FilterKind(IntEnum):
    """`apache.rocketmq.v2.FilterType` (UNSPECIFIED=0 is handled as TAG, like the proxy's converter)."""

    TAG = 1
    SQL = 2


MAX_NESTING: Final = 64
"""Deepest nesting of parentheses / NOT / unary signs a SQL92 expression may use."""

TAG_PROPERTY: Final = "TAGS"
"""The identifier that names the message tag in SQL92 (`MessageConst.PROPERTY_TAGS`)."""

_SUB_ALL: Final = "*"
_MAX_ECHO: Final = 200


class InvalidFilter(Invalid):
    """`ILLEGAL_FILTER_EXPRESSION`, with the 0-based character offset of the problem when known."""

    position: int | None

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(Code.ILLEGAL_FILTER_EXPRESSION, message)
        self.position = position


class MessageFilter(ABC):
    """A compiled subscription expression; `matches` is called once per candidate message."""

    __slots__ = ()

    kind: FilterKind
    expression: str

    @abstractmethod
    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        """Whether a message with this tag and these user properties is delivered."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind.name} {self.expression!r}>"


class _MatchAll(MessageFilter):
    __slots__ = ()

    kind = FilterKind.TAG
    expression = _SUB_ALL

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        return True


class _TagFilter(MessageFilter):
    __slots__ = ("expression", "kind", "tags")

    def __init__(self, expression: str, tags: frozenset[str]) -> None:
        self.kind = FilterKind.TAG
        self.expression = expression
        self.tags = tags

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        return tag is not None and tag in self.tags


_Value: TypeAlias = "str | int | float | bool | None"
_Eval: TypeAlias = "Callable[[str | None, Mapping[str, str]], _Value]"
_Cond: TypeAlias = "Callable[[str | None, Mapping[str, str]], bool | None]"


class _SqlFilter(MessageFilter):
    __slots__ = ("_cond", "expression", "kind")

    def __init__(self, expression: str, cond: _Cond) -> None:
        self.kind = FilterKind.SQL
        self.expression = expression
        self._cond = cond

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        # Only a definite TRUE selects the message; FALSE and unknown (NULL) do not.
        return self._cond(tag, properties) is True


MATCH_ALL: Final[MessageFilter] = _MatchAll()


def compile_filter(kind: FilterKind | int, expression: str) -> MessageFilter:
    """Compile a subscription expression once; raises `InvalidFilter` (an `Invalid` with code
    ILLEGAL_FILTER_EXPRESSION) when a SQL92 expression does not parse or type-check."""
    if kind == FilterKind.SQL:
        return _SqlFilter(expression, _Parser(expression).parse())
    # TAG, and UNSPECIFIED/unknown values, which the proxy's GrpcConverter maps to TAG.
    return _compile_tags(expression)


def check_filter(kind: FilterKind | int, expression: str) -> None:
    """A consumer's check of its subscription before any I/O: `compile_filter`, and for SQL92 also what
    this parser accepts on purpose but RocketMQ's broker cannot compile (the deviations in this module's
    docstring), so that a filter the client lets through is one both servers accept. Raises
    `InvalidFilter` (ILLEGAL_FILTER_EXPRESSION). The embedded server itself keeps accepting those forms.

    Refused, as `org.apache.rocketmq.filter` refuses them (apache/rocketmq `filter/.../SelectorParser.jj`,
    `ComparisonExpression`, `ConstantExpression`): `!=` (not in its grammar: use `<>`); a decimal literal
    of 0 (`ConstantExpression.createFloat` rejects values below `Double.MIN_VALUE`); and a prefix NOT whose
    operand is then ordered, ranged or listed (`NOT a > 1`, `NOT a BETWEEN 1 AND 2`, `NOT a IN ('x')`):
    its grammar binds NOT to the next operand, and `checkLessThanOperand` / `createInFilter` refuse the
    boolean `NOT a` there. `NOT (a > 1)` says the same in both grammars."""
    compile_filter(kind, expression)
    if kind != FilterKind.SQL:
        return
    tokens = _tokenize(expression)
    for i, tok in enumerate(tokens):
        if tok.type is _T.OP and tok.text == "!=":
            raise InvalidFilter(
                f"'!=' at offset {tok.pos} is not RocketMQ SQL92 (its broker refuses it): use '<>'", tok.pos
            )
        if tok.type is _T.DECIMAL and tok.value == 0.0:
            raise InvalidFilter(
                f"decimal literal {tok.text} at offset {tok.pos}: RocketMQ's broker refuses a decimal 0 "
                "(write the integer 0)",
                tok.pos,
            )
        if tok.type is _T.KEYWORD and tok.text == "NOT" and not _ends_operand(tokens[i - 1] if i else None):
            k = _operand_end(tokens, i + 1)
            after = tokens[k]
            if (after.type is _T.OP and after.text in _ORDERING_OPS) or _is_range_or_list(tokens, k):
                raise InvalidFilter(
                    f"NOT at offset {tok.pos} applies to a comparison: RocketMQ's broker binds NOT to the "
                    "next operand and cannot compile that; write NOT (...) around the comparison",
                    tok.pos,
                )


_ORDERING_OPS: Final = frozenset({">", ">=", "<", "<="})


def _ends_operand(tok: _Token | None) -> bool:
    """Whether `tok` can end an operand, so that a NOT after it is an infix one (`a NOT IN (...)`); after
    IS it is `IS NOT NULL`."""
    if tok is None:
        return False
    if tok.type in (_T.IDENT, _T.STRING, _T.INTEGER, _T.DECIMAL):
        return True
    if tok.type is _T.KEYWORD:
        return tok.text in ("TRUE", "FALSE", "NULL", "IS")
    return tok.type is _T.OP and tok.text == ")"


def _operand_end(tokens: list[_Token], j: int) -> int:
    """The index just after the unary operand starting at `j` (more NOTs and signs, then one literal or
    identifier, or a parenthesised expression), as upstream's `unaryExpr` reads it."""
    last = len(tokens) - 1
    while j < last and (
        (tokens[j].type is _T.KEYWORD and tokens[j].text == "NOT")
        or (tokens[j].type is _T.OP and tokens[j].text in ("+", "-"))
    ):
        j += 1
    if tokens[j].type is _T.OP and tokens[j].text == "(":
        depth = 0
        while j < last:
            if tokens[j].type is _T.OP and tokens[j].text == "(":
                depth += 1
            elif tokens[j].type is _T.OP and tokens[j].text == ")":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return last
    return min(j + 1, last)


def _is_range_or_list(tokens: list[_Token], k: int) -> bool:
    """Whether `tokens[k]` starts `[NOT] BETWEEN` or `[NOT] IN`."""
    tok = tokens[k]
    if tok.type is _T.KEYWORD and tok.text == "NOT":
        tok = tokens[min(k + 1, len(tokens) - 1)]
    return tok.type is _T.KEYWORD and tok.text in ("BETWEEN", "IN")


def _compile_tags(expression: str) -> MessageFilter:
    stripped = expression.strip()
    if not stripped or stripped == _SUB_ALL:
        return MATCH_ALL
    tags = frozenset(part.strip() for part in stripped.split("||") if part.strip())
    return _TagFilter(expression, tags)


# --------------------------------------------------------------------------------------------------
# Tokenizer


class _T(Enum):
    KEYWORD = "keyword"
    IDENT = "identifier"
    STRING = "string"
    INTEGER = "integer"
    DECIMAL = "decimal"
    OP = "operator"
    EOF = "end of expression"


_KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_STRING_OPS: Final = frozenset({"CONTAINS", "STARTSWITH", "ENDSWITH"})
_WHITESPACE: Final = " \t\n\r\f"
_IDENT_RE: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
# Same alternatives as FLOATING_POINT_LITERAL in SelectorParser.jj: 5.5, 5., 5.5E10, .5, .5E10, 5E10.
_DECIMAL_RE: Final = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
# DECIMAL_LITERAL: "0" | [1-9][0-9]* with an optional l/L; "007" therefore lexes as three tokens.
_INTEGER_RE: Final = re.compile(r"(?:0|[1-9][0-9]*)[lL]?")
_OPERATORS: Final = ("<>", "<=", ">=", "!=", "=", "<", ">", "(", ")", ",", "+", "-")
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Token:
    type: _T
    text: str  # keywords upper-cased, strings unescaped
    pos: int
    value: int | float | None = None

    def describe(self) -> str:
        if self.type is _T.EOF:
            return "end of expression"
        if self.type is _T.STRING:
            return f"string '{self.text}'"
        return f"{self.type.value} {self.text!r}"


def _tokenize(src: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if src.startswith("--", i):
            end = src.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if src.startswith("/*", i):
            end = src.find("*/", i + 2)
            if end < 0:
                raise InvalidFilter(f"unterminated comment at offset {i}", i)
            i = end + 2
            continue
        if c == "'":
            start, i, parts = i, i + 1, []
            while True:
                end = src.find("'", i)
                if end < 0:
                    raise InvalidFilter(f"unterminated string literal at offset {start}", start)
                parts.append(src[i:end])
                if src.startswith("''", end):
                    parts.append("'")
                    i = end + 2
                    continue
                i = end + 1
                break
            tokens.append(_Token(_T.STRING, "".join(parts), start))
            continue
        if c.isascii() and (
            c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isascii() and src[i + 1].isdigit())
        ):
            tokens.append(_number_token(src, i))
            i += len(tokens[-1].text)
            continue
        m = _IDENT_RE.match(src, i)
        if m:
            word = m.group()
            upper = word.upper()
            if upper in _KEYWORDS:
                tokens.append(_Token(_T.KEYWORD, upper, i))
            else:
                tokens.append(_Token(_T.IDENT, word, i))
            i = m.end()
            continue
        for op in _OPERATORS:
            if src.startswith(op, i):
                tokens.append(_Token(_T.OP, op, i))
                i += len(op)
                break
        else:
            raise InvalidFilter(f"unexpected character {c!r} at offset {i}", i)
    tokens.append(_Token(_T.EOF, "", n))
    return tokens


def _number_token(src: str, i: int) -> _Token:
    m = _DECIMAL_RE.match(src, i)
    if m:
        value = float(m.group())
        if math.isinf(value):
            raise InvalidFilter(f"decimal literal {m.group()} out of range at offset {i}", i)
        return _Token(_T.DECIMAL, m.group(), i, value)
    m = _INTEGER_RE.match(src, i)
    assert m is not None  # the caller saw a digit
    digits = m.group().rstrip("lL")
    number = int(digits)
    if number > _LONG_MAX:
        # ConstantExpression.createFromDecimal only supports Long.MIN_VALUE..Long.MAX_VALUE.
        raise InvalidFilter(f"integer literal {m.group()} out of range at offset {i}", i)
    return _Token(_T.INTEGER, m.group(), i, number)


# --------------------------------------------------------------------------------------------------
# Value conversions (Java Long.valueOf / Double.valueOf / Boolean.valueOf on property strings)

_JAVA_LONG_RE: Final = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_JAVA_TRIM: Final = "".join(chr(code) for code in range(0x21))


def _to_long(text: str) -> int | None:
    if not _JAVA_LONG_RE.fullmatch(text):
        return None
    value = int(text)
    return value if _LONG_MIN <= value <= _LONG_MAX else None


def _to_double(text: str) -> float | None:
    # Double.valueOf trims characters <= U+0020 and accepts a trailing f/F/d/D type suffix.
    text = text.strip(_JAVA_TRIM)
    if not _JAVA_DOUBLE_RE.fullmatch(text):
        return None
    if text[-1] in "fFdD":
        text = text[:-1]
    return float(text)


def _compare(lv: str | int | float | bool, rv: str | int | float | bool) -> int | None:
    """`ComparisonExpression.__compare` with string conversion on: -1/0/1, or None when a string does
    not convert (upstream throws there). Incomparable types answer -1, as upstream."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            # Upstream casts the Boolean itself to String here (ClassCastException); no result.
            return None if rt is str else -1
        if rt is bool:
            if lt is not str:
                return -1
            lv = str(lv).lower() == "true"
        elif lt is str:
            if rt is int:
                converted: int | float | None = _to_long(str(lv))
            else:
                converted = _to_double(str(lv))
            if converted is None:
                return None
            lv = converted
        elif rt is str:
            converted = _to_long(str(rv)) if lt is int else _to_double(str(rv))
            if converted is None:
                return None
            rv = converted
    # Same-kind values now (or int vs float, which Python compares exactly).
    if lv == rv:
        return 0
    return -1 if lv < rv else 1  # type: ignore[operator]


# --------------------------------------------------------------------------------------------------
# Parser / compiler


class _K(Enum):
    CONST = 1  # a literal; `const` holds it
    PROP = 2  # a property reference; `name` holds it
    BOOL = 3  # a boolean-valued expression (comparison, logic, NOT, IN, ...)
    VALUE = 4  # any other value expression (unary minus)


@dataclass(frozen=True, slots=True)
class _Node:
    kind: _K
    fn: _Eval
    pos: int
    const: _Value = None
    name: str = ""


def _const_fn(value: _Value) -> _Eval:
    return lambda tag, props: value


def _prop_fn(name: str) -> _Eval:
    if name == TAG_PROPERTY:
        return lambda tag, props: tag
    return lambda tag, props: props.get(name)


class _Parser:
    def __init__(self, src: str) -> None:
        self._src = src
        self._tokens = _tokenize(src)
        self._i = 0
        self._depth = 0

    # -- helpers -----------------------------------------------------------------------------

    def _peek(self, ahead: int = 0) -> _Token:
        return self._tokens[min(self._i + ahead, len(self._tokens) - 1)]

    def _next(self) -> _Token:
        tok = self._tokens[self._i]
        if tok.type is not _T.EOF:
            self._i += 1
        return tok

    def _is(self, type_: _T, text: str, ahead: int = 0) -> bool:
        tok = self._peek(ahead)
        return tok.type is type_ and tok.text == text

    def _accept(self, type_: _T, text: str) -> _Token | None:
        if self._is(type_, text):
            return self._next()
        return None

    def _expect(self, type_: _T, text: str, what: str) -> _Token:
        tok = self._accept(type_, text)
        if tok is None:
            raise self._syntax(f"expected {what}")
        return tok

    def _syntax(self, message: str, tok: _Token | None = None) -> InvalidFilter:
        tok = tok or self._peek()
        return self._error(f"{message}, found {tok.describe()}", tok.pos)

    def _error(self, message: str, pos: int) -> InvalidFilter:
        echo = self._src if len(self._src) <= _MAX_ECHO else self._src[:_MAX_ECHO] + "..."
        return InvalidFilter(f"{message} at offset {pos} in SQL92 expression {echo!r}", pos)

    def _enter(self, pos: int) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING:
            raise self._error(f"expression nested deeper than {MAX_NESTING} levels", pos)

    def _leave(self) -> None:
        self._depth -= 1

    # -- entry -------------------------------------------------------------------------------

    def parse(self) -> _Cond:
        if self._peek().type is _T.EOF:
            raise self._error("empty expression", 0)
        node = self._or()
        if self._peek().type is not _T.EOF:
            raise self._syntax("unexpected input")
        return self._as_condition(node)

    def _as_condition(self, node: _Node) -> _Cond:
        """`SelectorParser.asBooleanExpression`: booleans, TRUE/FALSE/NULL, or a property (cast)."""
        if node.kind is _K.BOOL:
            return node.fn  # type: ignore[return-value]
        if node.kind is _K.CONST and (node.const is None or type(node.const) is bool):
            constant = node.const
            return lambda tag, props: constant
        if node.kind is _K.PROP:
            fn = node.fn
            # UnaryExpression.createBooleanCast: NULL stays NULL, any non-Boolean (all strings) is FALSE.
            return lambda tag, props: None if fn(tag, props) is None else False
        raise self._error("expression does not result in a boolean value", node.pos)

    # -- logic -------------------------------------------------------------------------------

    def _or(self) -> _Node:
        first = self._and()
        if not self._is(_T.KEYWORD, "OR"):
            return first
        conds = [self._as_condition(first)]
        while self._accept(_T.KEYWORD, "OR"):
            conds.append(self._as_condition(self._and()))
        return _Node(_K.BOOL, _any_of(tuple(conds)), first.pos)

    def _and(self) -> _Node:
        first = self._not()
        if not self._is(_T.KEYWORD, "AND"):
            return first
        conds = [self._as_condition(first)]
        while self._accept(_T.KEYWORD, "AND"):
            conds.append(self._as_condition(self._not()))
        return _Node(_K.BOOL, _all_of(tuple(conds)), first.pos)

    def _not(self) -> _Node:
        tok = self._accept(_T.KEYWORD, "NOT")
        if tok is None:
            return self._equality()
        self._enter(tok.pos)
        inner = self._as_condition(self._not())
        self._leave()

        def negate(tag: str | None, props: Mapping[str, str]) -> bool | None:
            value = inner(tag, props)
            return None if value is None else not value

        return _Node(_K.BOOL, negate, tok.pos)

    # -- equality ----------------------------------------------------------------------------

    def _equality(self) -> _Node:
        left = self._comparison()
        while True:
            tok = self._peek()
            if tok.type is _T.OP and tok.text in ("=", "<>", "!="):
                self._next()
                right = self._comparison()
                left = self._make_equal(left, right, negate=tok.text != "=", op=tok)
            elif self._is(_T.KEYWORD, "IS"):
                self._next()
                negate = self._accept(_T.KEYWORD, "NOT") is not None
                self._expect(_T.KEYWORD, "NULL", "NULL after IS" + (" NOT" if negate else ""))
                left = _Node(_K.BOOL, _is_null(left.fn, negate), left.pos)
            else:
                return left

    def _make_equal(self, left: _Node, right: _Node, *, negate: bool, op: _Token) -> _Node:
        # ComparisonExpression.checkEqualOperand / checkEqualOperandCompatability.
        for side in (left, right):
            if side.kind is _K.CONST and side.const is None:
                raise self._error(f"NULL cannot be compared with {op.text!r}; use IS NULL", side.pos)
        if (
            left.kind is _K.CONST
            and right.kind is _K.CONST
            and type(left.const) is bool
            and type(right.const) is not bool
        ):
            raise self._error("a boolean literal cannot be compared with a non-boolean literal", op.pos)
        lf, rf = left.fn, right.fn

        def equal(tag: str | None, props: Mapping[str, str]) -> bool | None:
            lv = lf(tag, props)
            if lv is None:
                return None
            rv = rf(tag, props)
            if rv is None:
                return None
            answer = _compare(lv, rv)
            if answer is None:
                return None
            return (answer == 0) is not negate

        return _Node(_K.BOOL, equal, left.pos)

    # -- comparison --------------------------------------------------------------------------

    def _comparison(self) -> _Node:
        left = self._unary()
        while True:
            tok = self._peek()
            if tok.type is _T.OP and tok.text in _ORDERING:
                self._next()
                right = self._unary()
                left = self._make_ordering(left, right, tok)
                continue
            negate = False
            if tok.type is _T.KEYWORD and tok.text == "NOT":
                after = self._peek(1)
                if not (after.type is _T.KEYWORD and after.text in ("BETWEEN", "IN", *_STRING_OPS)):
                    return left
                self._next()
                negate = True
                tok = self._peek()
            if tok.type is not _T.KEYWORD:
                return left
            if tok.text == "BETWEEN":
                self._next()
                low = self._unary()
                and_tok = self._expect(_T.KEYWORD, "AND", "AND between the BETWEEN bounds")
                high = self._unary()
                left = self._make_between(left, low, high, negate, tok, and_tok)
            elif tok.text == "IN":
                self._next()
                left = self._make_in(left, self._string_list(), negate, tok)
            elif tok.text in _STRING_OPS:
                self._next()
                search = self._string_literal(f"a string literal after {tok.text}")
                left = _Node(_K.BOOL, _string_match(left.fn, tok.text, search, negate), left.pos)
            else:
                return left

    def _check_ordered_operand(self, node: _Node, op: _Token) -> None:
        # ComparisonExpression.checkLessThanOperand: only numbers (or values that may be numbers).
        if node.kind is _K.CONST:
            if type(node.const) in (int, float):
                return
            raise self._error(f"value {self._image(node)} cannot be compared with {op.text!r}", node.pos)
        if node.kind is _K.BOOL:
            raise self._error(f"a boolean expression cannot be compared with {op.text!r}", node.pos)

    def _image(self, node: _Node) -> str:
        if node.const is None:
            return "NULL"
        if type(node.const) is bool:
            return "TRUE" if node.const else "FALSE"
        if isinstance(node.const, str):
            return "'" + node.const.replace("'", "''") + "'"
        return str(node.const)

    def _make_ordering(self, left: _Node, right: _Node, op: _Token) -> _Node:
        self._check_ordered_operand(left, op)
        self._check_ordered_operand(right, op)
        return _Node(_K.BOOL, _ordering(left.fn, right.fn, _ORDERING[op.text]), left.pos)

    def _make_between(
        self, value: _Node, low: _Node, high: _Node, negate: bool, op: _Token, and_tok: _Token
    ) -> _Node:
        for side, tok in ((value, op), (low, op), (high, and_tok)):
            self._check_ordered_operand(side, tok)
        if not negate and low.kind is _K.CONST and high.kind is _K.CONST:
            # ComparisonExpression.createBetween: constant bounds must be ordered.
            assert low.const is not None and high.const is not None
            if _compare(high.const, low.const) == -1:
                raise self._error(
                    f"BETWEEN lower bound {self._image(low)} is greater than upper bound {self._image(high)}",
                    low.pos,
                )
        vf, lf, hf = value.fn, low.fn, high.fn

        def between(tag: str | None, props: Mapping[str, str]) -> bool | None:
            v = vf(tag, props)
            lower = _order(v, lf(tag, props))
            upper = _order(v, hf(tag, props))
            if negate:
                # NOT BETWEEN is `v < low OR v > high`, with three-valued OR.
                if lower == -1 or upper == 1:
                    return True
                if lower is None or upper is None:
                    return None
                return False
            # BETWEEN is `v >= low AND v <= high`, with three-valued AND.
            if lower == -1 or upper == 1:
                return False
            if lower is None or upper is None:
                return None
            return True

        return _Node(_K.BOOL, between, value.pos)

    def _make_in(self, left: _Node, items: frozenset[str], negate: bool, op: _Token) -> _Node:
        if left.kind is not _K.PROP:
            # ComparisonExpression.createInFilter: "Expected a property for In expression".
            raise self._error(f"{'NOT IN' if negate else 'IN'} needs a property on its left", op.pos)
        fn = left.fn

        def member(tag: str | None, props: Mapping[str, str]) -> bool | None:
            value = fn(tag, props)
            if value is None:
                return None
            return (value in items) is not negate

        return _Node(_K.BOOL, member, left.pos)

    def _string_list(self) -> frozenset[str]:
        self._expect(_T.OP, "(", "'(' after IN")
        items = [self._string_literal("a string literal in the IN list")]
        while self._accept(_T.OP, ","):
            items.append(self._string_literal("a string literal in the IN list"))
        self._expect(_T.OP, ")", "',' or ')' in the IN list")
        return frozenset(items)

    def _string_literal(self, what: str) -> str:
        tok = self._peek()
        if tok.type is not _T.STRING:
            raise self._syntax(f"expected {what}")
        self._next()
        return tok.text

    # -- unary / primary ---------------------------------------------------------------------

    def _unary(self) -> _Node:
        tok = self._peek()
        if tok.type is _T.OP and tok.text in ("+", "-"):
            self._next()
            self._enter(tok.pos)
            inner = self._unary()
            self._leave()
            if tok.text == "+":
                return inner
            fn = inner.fn

            def negative(tag: str | None, props: Mapping[str, str]) -> _Value:
                # UnaryExpression.createNegate: numbers are negated, anything else is NULL.
                value = fn(tag, props)
                if type(value) is int or type(value) is float:
                    return -value
                return None

            return _Node(_K.VALUE, negative, tok.pos)
        return self._primary()

    def _primary(self) -> _Node:
        tok = self._next()
        if tok.type is _T.STRING:
            return _Node(_K.CONST, _const_fn(tok.text), tok.pos, const=tok.text)
        if tok.type in (_T.INTEGER, _T.DECIMAL):
            return _Node(_K.CONST, _const_fn(tok.value), tok.pos, const=tok.value)
        if tok.type is _T.KEYWORD and tok.text in ("TRUE", "FALSE", "NULL"):
            value = {"TRUE": True, "FALSE": False, "NULL": None}[tok.text]
            return _Node(_K.CONST, _const_fn(value), tok.pos, const=value)
        if tok.type is _T.IDENT:
            return _Node(_K.PROP, _prop_fn(tok.text), tok.pos, name=tok.text)
        if tok.type is _T.OP and tok.text == "(":
            self._enter(tok.pos)
            inner = self._or()
            self._leave()
            self._expect(_T.OP, ")", "')'")
            return inner
        raise self._syntax("expected a literal, a property name or '('", tok)


# --------------------------------------------------------------------------------------------------
# Evaluation helpers


def _any_of(conds: tuple[_Cond, ...]) -> _Cond:
    def any_of(tag: str | None, props: Mapping[str, str]) -> bool | None:
        unknown = False
        for cond in conds:
            value = cond(tag, props)
            if value is True:
                return True
            if value is None:
                unknown = True
        return None if unknown else False

    return any_of


def _all_of(conds: tuple[_Cond, ...]) -> _Cond:
    def all_of(tag: str | None, props: Mapping[str, str]) -> bool | None:
        unknown = False
        for cond in conds:
            value = cond(tag, props)
            if value is False:
                return False
            if value is None:
                unknown = True
        return None if unknown else True

    return all_of


def _is_null(fn: _Eval, negate: bool) -> _Cond:
    if negate:
        return lambda tag, props: fn(tag, props) is not None
    return lambda tag, props: fn(tag, props) is None


def _order(lv: _Value, rv: _Value) -> int | None:
    """Ordering for <, <=, >, >=: None (unknown) for NULL operands or values that are not numbers."""
    if lv is None or rv is None:
        return None
    if type(lv) is str and type(rv) is str:
        # ComparisonExpression.evaluate: two strings are only ordered as doubles.
        ld, rd = _to_double(lv), _to_double(rv)
        if ld is None or rd is None:
            return None
        return _compare(ld, rd)
    return _compare(lv, rv)


_ORDERING: Final[dict[str, Callable[[int], bool]]] = {
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def _ordering(lf: _Eval, rf: _Eval, test: Callable[[int], bool]) -> _Cond:
    def ordered(tag: str | None, props: Mapping[str, str]) -> bool | None:
        answer = _order(lf(tag, props), rf(tag, props))
        return None if answer is None else test(answer)

    return ordered


def _string_match(fn: _Eval, op: str, search: str, negate: bool) -> _Cond:
    if not search:
        # Upstream answers FALSE for an empty search string, for the NOT forms too.
        return lambda tag, props: False
    if op == "CONTAINS":

        def test(value: str) -> bool:
            return search in value

    elif op == "STARTSWITH":

        def test(value: str) -> bool:
            return value.startswith(search)

    else:

        def test(value: str) -> bool:
            return value.endswith(search)

    def match(tag: str | None, props: Mapping[str, str]) -> bool | None:
        value = fn(tag, props)
        if type(value) is not str:
            # A missing property (or a non-string value) is FALSE here, not unknown, as upstream.
            return False
        return test(value) is not negate

    return match
