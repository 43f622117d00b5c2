"""Tests for the calculator's safe expression evaluator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools_builtin import safe_eval
from tools_builtin.safe_eval import CalculatorError, evaluate, format_number

# --------------------------------------------------------------------------- correct results

CASES = [
    # the examples from the spec
    ("2**10 + 3*7", 1045),
    ("7/2", 3.5),
    ("2^10", 1024),
    ("-3 + 4*(2-5)", -15),
    ("sqrt(16)", 4.0),
    ("10 // 3", 3),
    ("10 % 3", 1),
    ("max(1, 5, 3)", 5),
    # numbers and unary operators
    ("42", 42),
    ("1e3", 1000.0),
    ("2.5e-3", 0.0025),
    ("+5", 5),
    ("--5", 5),
    ("-(-(3))", 3),
    ("1_000 + 0x10", 1016),
    ("  1 + 1  ", 2),
    ("(1 +\n 2)", 3),
    ("10**1000 // 10**999", 10),
    # operators and precedence
    ("2 + 3 * 4", 14),
    ("(2 + 3) * 4", 20),
    ("7 // -2", -4),
    ("-7 % 3", 2),
    ("7.5 % 2", 1.5),
    ("2**-1", 0.5),
    ("2**3**2", 512),
    ("-2**2", -4),
    ("2*3^2", 18),
    ("2^3^2", 512),
    ("2^-2", 0.25),
    ("-2^2", -4),
    ("(-2)^3", -8),
    ("2 ^ 0.5 * 2 ^ 0.5", pytest.approx(2.0)),
    ("3 × 4", 12),
    ("8 ÷ 2", 4.0),
    ("5 − 7", -2),
    # exponents that are huge but cheap
    ("1**(10**100)", 1),
    ("0**(10**100)", 0),
    ("(-1)**(10**100)", 1),
    ("(-1)**(10**100 + 1)", -1),
    ("5**0", 1),
    ("0**0", 1),
    ("2**-(10**100)", 0.0),
    ("2**9999", 2**9999),
    ("10**1000", 10**1000),
    # constants
    ("pi", math.pi),
    ("e", math.e),
    ("tau", math.tau),
    ("2*pi", math.tau),
    # functions
    ("abs(-7)", 7),
    ("abs(-2.5)", 2.5),
    ("round(2.567, 2)", 2.57),
    ("round(2.6)", 3),
    ("round(1234, -2)", 1200),
    ("min(3, 1, 2)", 1),
    ("max(1, 2.5)", 2.5),
    ("sqrt(2)", math.sqrt(2)),
    ("cbrt(27)", 3.0),
    ("cbrt(-8)", -2.0),
    ("cbrt(2)", pytest.approx(2 ** (1 / 3))),
    ("exp(0)", 1.0),
    ("exp(1)", math.e),
    ("log(e)", 1.0),
    ("log(8, 2)", pytest.approx(3.0)),
    ("log(100, 10)", pytest.approx(2.0)),
    ("ln(e**2)", pytest.approx(2.0)),
    ("log10(1000)", 3.0),
    ("log2(1024)", 10.0),
    ("log(10**3000)", pytest.approx(3000 * math.log(10))),
    ("sin(0)", 0.0),
    ("cos(0)", 1.0),
    ("tan(0)", 0.0),
    ("sin(pi/2)", 1.0),
    ("asin(1)", math.pi / 2),
    ("acos(1)", 0.0),
    ("atan(1)", math.pi / 4),
    ("floor(2.7)", 2),
    ("floor(-2.5)", -3),
    ("ceil(2.1)", 3),
    ("factorial(5)", 120),
    ("factorial(0)", 1),
    ("factorial(5.0)", 120),
    ("factorial(1000)", math.factorial(1000)),
    ("gcd(12, 18)", 6),
    ("gcd(12, 18, 8)", 2),
    ("lcm(4, 6)", 12),
    ("lcm(2, 3, 4)", 12),
    ("sqrt(abs(-16)) + max(1, min(2, 3))", 6.0),
]


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_evaluate(expression: str, expected: object) -> None:
    result = evaluate(expression)
    assert result == expected
    if isinstance(expected, (int, float)):
        assert type(result) is type(expected)


FORMATS = [
    ("7/2", "3.5"),
    ("6/3", "2"),
    ("1/3", "0.333333333333"),
    ("2**0.5", "1.41421356237"),
    ("0.1 + 0.2", "0.3"),
    ("sqrt(16)", "4"),
    ("-0.0", "0"),
    ("1e20", "1e+20"),
    ("1e15", "1e+15"),
    ("123456789012345.0", "123456789012345"),
    ("1e-20", "1e-20"),
    ("-1/3", "-0.333333333333"),
    ("10**20", "100000000000000000000"),
    ("-15", "-15"),
    ("2.5e300", "2.5e+300"),
]


@pytest.mark.parametrize(("expression", "expected"), FORMATS)
def test_format_number(expression: str, expected: str) -> None:
    assert format_number(evaluate(expression)) == expected


def test_format_number_never_hits_the_int_str_limit() -> None:
    assert format_number(evaluate("factorial(1000)")) == str(math.factorial(1000))
    assert format_number(10**5000) == "1.000000000000e+5000"  # beyond Python's 4300 digits
    assert format_number(True) == "1"
    assert format_number(float("inf")) == "inf"


# --------------------------------------------------------------------------- errors

ERRORS = [
    # names and functions
    ("x", "unknown name 'x'; allowed names: pi, e, tau"),
    ("x + 1", "'x'"),
    ("__builtins__", "__builtins__"),
    ("open('x')", "function 'open' is not allowed; allowed: abs"),
    ("__import__('os')", "'__import__'"),
    ("sum(1, 2)", "'sum'"),
    ("pi()", "constant"),
    ("sqrt", "'sqrt' is a function"),
    ("round(2.5, ndigits=1)", "keyword arguments"),
    ("max(*(1, 2))", "starred"),
    ("sqrt(1, 2)", "sqrt() takes 1 argument"),
    ("sqrt()", "sqrt() takes 1 argument"),
    ("max(1)", "max() takes at least 2"),
    ("round(1, 2, 3)", "round() takes 1-2"),
    # literals that are not real numbers
    ("1j", "complex"),
    ("2 + 3j", "complex"),
    ("'a'", "str"),
    ("b'a'", "bytes"),
    ("f'{1}'", "strings"),
    ("True", "True"),
    ("False + 1", "False"),
    ("None", "None"),
    ("...", "ellipsis"),
    # syntax that is not arithmetic
    ("[1, 2]", "lists"),
    ("(1, 2)", "tuples"),
    ("{1}", "sets"),
    ("{1: 2}", "dicts"),
    ("lambda: 1", "lambda"),
    ("a if 1 else 2", "conditional"),
    ("1 if 1 else 2", "conditional"),
    ("1 < 2", "comparisons"),
    ("1 and 2", "'and'/'or'"),
    ("[x for x in (1, 2)]", "comprehensions"),
    ("max(1, (x for x in (1, 2)))", "comprehensions"),
    ("(y := 1)", "assignments"),
    ("x[0]", "subscripts"),
    ("().__class__", "'.__class__'"),
    ("(1).real", "'.real'"),
    ("__import__('os').system('ls')", "'.system'"),
    ("pi.__class__.__mro__", "attribute access"),
    ("1 << 3", "operator '<<'"),
    ("1 >> 3", "operator '>>'"),
    ("1 | 2", "operator '|'"),
    ("1 & 2", "operator '&'"),
    ("1 @ 2", "operator '@'"),
    ("~1", "operator '~'"),
    ("not 1", "operator 'not'"),
    # syntax errors and input shape
    ("", "empty expression"),
    ("   \n ", "empty expression"),
    ("=2+2", "leading '='"),
    ("2+*3", "invalid expression '2+*3': syntax error at position 3"),
    ("2^*3", "syntax error at position 3"),
    ("(1+2", "never closed"),
    ("1 2", "syntax error"),
    ("1; 2", "syntax error"),
    ("x = 1", "syntax error"),
    ("import os", "syntax error"),
    ("1\x002", "null bytes"),
    ("1" * 1001, "too long"),
    ("(" * 500 + "1" + ")" * 500, "too long"),
    ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
    ("-" * 900 + "1", "too complex"),
    ("sqrt(" * 150 + "1" + ")" * 150, "too complex"),
    # arithmetic failures
    ("1/0", "division by zero"),
    ("1/(2-2)", "division by zero"),
    ("5 // 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("5.0 % 0.0", "division by zero"),
    ("0**-1", "division by zero"),
    ("0.0**-1", "division by zero"),
    ("0^-2", "division by zero"),
    ("10.0**400", "result too large"),
    ("exp(1000)", "result too large: exp(1000)"),
    ("1e309", "too large"),
    ("1e308 * 10", "result too large"),
    ("1e308 + 1e308", "result too large"),
    ("10**400 * 0.5", "result too large"),
    ("sqrt(10**400)", "too large"),
    ("(-8)**(1/3)", "complex"),
    ("(-2)^0.5", "complex"),
    ("sqrt(-1)", "math domain error: sqrt(-1)"),
    ("log(0)", "math domain error: log(0)"),
    ("log(-1, 10)", "log(-1, 10)"),
    ("ln(0)", "ln(0)"),
    ("acos(2)", "acos(2)"),
    ("log(8, 1)", "base"),
    ("log(8, 0)", "base"),
    ("factorial(1001)", "factorial(1001) is too large"),
    ("factorial(-1)", "non-negative integer"),
    ("factorial(2.5)", "non-negative integer"),
    ("gcd(1.5, 2)", "gcd(1.5, 2)"),
    ("lcm(2, 0.5)", "lcm(2, 0.5)"),
    ("round(1.5, 0.5)", "round(x, n)"),
    ("round(5, -10**9)", "round(x, n)"),
]


@pytest.mark.parametrize(("expression", "fragment"), ERRORS)
def test_errors(expression: str, fragment: str) -> None:
    with pytest.raises(CalculatorError) as info:
        evaluate(expression)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_error_is_a_value_error() -> None:
    assert issubclass(CalculatorError, ValueError)
    with pytest.raises(ValueError):
        evaluate("1/0")


def test_syntax_error_message_is_exact() -> None:
    with pytest.raises(CalculatorError, match=r"^invalid expression '2\+\*3': syntax error at "):
        evaluate("2+*3")


@pytest.mark.parametrize("value", [None, 42, b"1+1", ["1"]])
def test_non_string_input(value: object) -> None:
    with pytest.raises(CalculatorError, match="must be a string"):
        evaluate(value)  # type: ignore[arg-type]


def test_long_flat_sum_is_not_too_deep() -> None:
    assert evaluate("+".join(["1"] * 500)) == 500
    assert evaluate("-".join(["1"] * 300)) == -298


def test_node_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safe_eval, "MAX_NODES", 10)
    with pytest.raises(CalculatorError, match="too complex"):
        evaluate("+".join(["1"] * 20))


ATTACKS = [
    "__import__('os').system('ls')",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "[1,2]",
    "lambda: 1",
    "open('x')",
    "a if 1 else 2",
    "exec('1')",
    "eval('1')",
    "globals()",
    "__builtins__.open",
    "getattr(1, 'real')",
    "print(1)",
    "breakpoint()",
    "(lambda f: f(f))(lambda f: f(f))",
    "[x for x in range(10**9)]",
    "'a' * 10**9",
    "sqrt.__globals__",
]


@pytest.mark.parametrize("expression", ATTACKS)
def test_attacks_are_rejected(expression: str) -> None:
    with pytest.raises(CalculatorError):
        evaluate(expression)


# Results that would take ages or gigabytes must be refused before they are computed.
HUGE = [
    "9**9**9**9",
    "9^9^9^9",
    "9**9**9",  # ~369 million digits
    "2**10**10",
    "10**10**10",
    "(10**1000)**1000",
    "(2**5000)**(2**5000)",
    "10.0**10**10",
    "2**10000",
    "10**3000 * 10**3000",
    "(10**1500) * (10**1500) * (10**1500)",
    "factorial(10**6)",
    "factorial(factorial(10))",
    "factorial(10**100)",
    "lcm(2**6000, 3**6000)",
    "exp(10**6)",
    "round(5, -10**100)",
    "9**9**9**9**9**9**9**9",
]


@pytest.mark.timeout(5)
def test_huge_results_are_refused_fast() -> None:
    for expression in HUGE:
        with pytest.raises(CalculatorError, match="too large|round"):
            evaluate(expression)


def test_huge_power_message_says_why() -> None:
    with pytest.raises(CalculatorError, match=r"9\*\*387420489 would have about 3.7e\+08 digits"):
        evaluate("9**9**9")


# --------------------------------------------------------------------------- properties


def _check_total(text: str) -> None:
    """evaluate() returns a number or raises CalculatorError with a one-line message."""
    try:
        result = evaluate(text)
    except CalculatorError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert type(result) in (int, float)
        format_number(result)


@pytest.mark.timeout(30)
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_arbitrary_text_never_raises_anything_else(text: str) -> None:
    _check_total(text)


@pytest.mark.timeout(30)
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.e+-*/%^() ,pisqrtlogfactorbmxn_[]'", max_size=40))
def test_calculator_like_text_never_raises_anything_else(text: str) -> None:
    _check_total(text)


def _number(n: int) -> str:
    return f"({n})" if n < 0 else str(n)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "//", "%"]), children)
    return st.one_of(
        binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        binary.map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        children.map(lambda c: f"-{c}"),
    )


ARITHMETIC = st.recursive(
    st.one_of(
        st.integers(min_value=-50, max_value=50).map(_number),
        st.sampled_from(["0.5", "2.25", "1e1", "0.0"]),
    ),
    _combine,
    max_leaves=12,
)


@pytest.mark.timeout(30)
@settings(max_examples=300, deadline=None)
@given(ARITHMETIC)
def test_matches_python_arithmetic(expression: str) -> None:
    try:
        expected = eval(expression, {"__builtins__": {}})  # the reference, on trusted input
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(expression)
        return
    result = evaluate(expression)
    assert type(result) is type(expected)
    assert result == expected or (math.isnan(expected) and math.isnan(result))
