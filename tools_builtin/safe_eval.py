"""Safe arithmetic evaluator behind the ``calculator`` tool (no ``eval``, ``exec`` or sympy).

The text is parsed with ``ast.parse(mode="eval")`` and only whitelisted nodes are evaluated:
int and float literals (``1e3`` too), unary ``+``/``-``, ``+ - * / // % **``, parentheses,
the constants ``pi``, ``e``, ``tau`` and the functions in ``FUNCTIONS``.

``^`` means power, because models often write ``2^10``: it is rewritten to ``**`` before
parsing, so it has the usual precedence and associativity (``2*3^2 == 18``,
``2^3^2 == 512``); bitwise XOR is not available. ``×``, ``÷`` and ``−`` mean ``*``, ``/``, ``-``.

Limits keep every call fast and small: ``MAX_LENGTH`` characters, ``MAX_NODES`` AST nodes,
``MAX_DEPTH`` nesting levels, and integers of at most ``MAX_INT_BITS`` bits (the sizes of
``a*b`` and ``a**b`` are estimated before computing, so ``9**9**9**9`` fails at once).
Every failure raises ``CalculatorError`` with a one-line message meant for the model.
"""

from __future__ import annotations

import ast
import decimal
import math
import operator
import warnings
from collections.abc import Callable
from typing import Any

Number = int | float

MAX_LENGTH = 1000
MAX_NODES = 1000
MAX_DEPTH = 100  # a+b+c+... chains count as one level; parentheses alone add none
# Fits factorial(1000) (8530 bits); 10_000 bits is ~3010 digits, below Python's 4300-digit
# int/str conversion limit, so every result can be printed.
MAX_INT_BITS = 10_000
MAX_DIGITS = int(MAX_INT_BITS * math.log10(2))
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 1000

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_TRANSLATE = str.maketrans({"×": "*", "÷": "/", "−": "-", "\n": " ", "\r": " ", "\t": " "})
_FLOAT_RANGE = "exceeds the floating-point range (about 1.8e308)"
_HINT = "use numbers, + - * / // % ** ^, parentheses, pi, e, tau and functions like sqrt(x)"


class CalculatorError(ValueError):
    """An expression that cannot be evaluated; the message is shown to the model, so it must
    say what is wrong and how to fix it, in one line."""


def _too_big(what: str = "integers are") -> CalculatorError:
    return CalculatorError(f"result too large: {what} limited to {MAX_DIGITS} digits")


def _mul(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() - 1 > MAX_INT_BITS:
            raise _too_big()
    return a * b


def _pow(a: Number, b: Number) -> Number:
    if not (isinstance(a, int) and isinstance(b, int)) or b < 0:
        if a == 0 and b < 0:
            raise CalculatorError("division by zero: 0 cannot be raised to a negative power")
        return a**b  # a float: overflow raises OverflowError, complex results are caught later
    if b == 0 or a in (0, 1):
        return 1 if b == 0 else a
    if a == -1:
        return 1 if b % 2 == 0 else -1
    bits = b * math.log2(abs(a)) if b.bit_length() < 64 else math.inf
    if bits > MAX_INT_BITS + 1:  # refuse before computing: 9**9**9 would take ages
        size = f"about {bits * math.log10(2):.2g}" if bits < 1e300 else "too many"
        raise _too_big(f"{_short(a)}**{_short(b)} would have {size} digits; integers are")
    return a**b


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise CalculatorError(
            f"round(x, n): n must be an integer from -{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}"
        )
    return round(x, ndigits)


def _log(x: Number, base: Number | None = None) -> float:
    if base is not None and (base <= 0 or base == 1):
        raise CalculatorError(f"log(x, base): base must be positive and not 1, got {_short(base)}")
    return math.log(x) if base is None else math.log(x, base)


def _cbrt(x: Number) -> float:
    root = abs(x) ** (1 / 3)  # made exact for perfect cubes (even math.cbrt(27) can be off)
    return math.copysign(float(round(root)) if round(root) ** 3 == abs(x) else root, x)


def _factorial(n: Number) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise CalculatorError(f"factorial(n) needs a non-negative integer, got {_short(n)}")
    if n > MAX_FACTORIAL:
        raise CalculatorError(f"factorial({_short(n)}) is too large; limit is {MAX_FACTORIAL}")
    return math.factorial(n)


def _lcm(*args: int) -> int:
    result = 1
    for a in args:  # the result grows by at most a's size per step: cheap to check after
        result = math.lcm(result, a)
        if result.bit_length() > MAX_INT_BITS:
            raise _too_big()
    return result


# fmt: off
# name -> (function, min args, max args or None for unlimited)
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "abs": (abs, 1, 1), "round": (_round, 1, 2), "min": (min, 2, None), "max": (max, 2, None),
    "sqrt": (math.sqrt, 1, 1), "cbrt": (_cbrt, 1, 1), "exp": (math.exp, 1, 1),
    "log": (_log, 1, 2), "ln": (math.log, 1, 1), "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1), "sin": (math.sin, 1, 1), "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1), "asin": (math.asin, 1, 1), "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1), "floor": (math.floor, 1, 1), "ceil": (math.ceil, 1, 1),
    "factorial": (_factorial, 1, 1), "gcd": (math.gcd, 2, None), "lcm": (_lcm, 2, None),
}
_BINOPS: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", _mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod), ast.Pow: ("**", _pow),
}
_OPERATOR_SYMBOLS = {ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&",
                     ast.BitXor: "^", ast.MatMult: "@", ast.Invert: "~", ast.Not: "not"}
_SYNTAX_NAMES = {
    ast.Subscript: "subscripts ([...])", ast.List: "lists", ast.Tuple: "tuples", ast.Set: "sets",
    ast.Dict: "dicts", ast.Lambda: "lambda functions", ast.IfExp: "conditional expressions",
    ast.Compare: "comparisons", ast.BoolOp: "'and'/'or'", ast.NamedExpr: "assignments",
    ast.JoinedStr: "strings", ast.Starred: "starred arguments (*args)",
}
# fmt: on


def _short(value: Any) -> str:
    text = format_number(value) if isinstance(value, (int, float)) else repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _args_text(args: tuple[Number, ...] | list[Number]) -> str:
    return ", ".join(_short(a) for a in args)


def _check_node(node: ast.expr) -> None:
    """Raise CalculatorError unless ``node`` is on the whitelist."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None:
            raise CalculatorError(f"{value!r} is not allowed; use numbers such as 1 or 0")
        if isinstance(value, complex):
            raise CalculatorError("complex numbers (like 2j) are not supported")
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculatorError(f"number too large: a literal {_FLOAT_RANGE}")
        if not isinstance(value, (int, float)):
            raise CalculatorError(f"{type(value).__name__} values are not allowed; {_HINT}")
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise CalculatorError(f"'{node.id}' is a function; call it like {node.id}(2)")
        if node.id not in CONSTANTS:
            raise CalculatorError(f"unknown name '{node.id}'; allowed names: pi, e, tau")
    elif isinstance(node, (ast.UnaryOp, ast.BinOp)):
        if type(node.op) not in _BINOPS and not isinstance(node.op, (ast.UAdd, ast.USub)):
            symbol = _OPERATOR_SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise CalculatorError(f"operator '{symbol}' is not supported; {_HINT}")
    elif isinstance(node, ast.Call):
        _check_call(node)
    elif isinstance(node, ast.Attribute):
        raise CalculatorError(f"attribute access ('.{node.attr}') is not allowed; {_HINT}")
    else:
        what = _SYNTAX_NAMES.get(type(node), f"'{type(node).__name__}' expressions")
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            what = "comprehensions"
        raise CalculatorError(f"{what} are not allowed in a calculator expression; {_HINT}")


def _check_call(node: ast.Call) -> None:
    if not isinstance(node.func, ast.Name):
        _check_node(node.func)  # attribute access etc. gives the precise message
        raise CalculatorError(f"only named functions can be called, e.g. sqrt(2); {_HINT}")
    name = node.func.id
    if name in CONSTANTS:
        raise CalculatorError(f"'{name}' is a constant, not a function; write {name} without ()")
    if name not in FUNCTIONS:
        raise CalculatorError(f"function '{name}' is not allowed; allowed: {', '.join(FUNCTIONS)}")
    if node.keywords:
        raise CalculatorError(f"keyword arguments are not allowed in {name}(); pass values only")
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise CalculatorError(f"starred arguments (*args) are not allowed in {name}()")
    _, low, high = FUNCTIONS[name]
    if len(node.args) < low or (high is not None and len(node.args) > high):
        want = f"{low}" if low == high else f"at least {low}" if high is None else f"{low}-{high}"
        raise CalculatorError(f"{name}() takes {want} argument(s), got {len(node.args)}")


def _children(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    return list(node.args) if isinstance(node, ast.Call) else []


def _source_position(text: str, offset: int) -> int:
    """Map a 1-based offset in the parsed text (``^`` became ``**``) back onto ``text``."""
    shifted = 0
    for index, char in enumerate(text):
        shifted += 2 if char == "^" else 1
        if shifted >= offset:
            return index + 1
    return len(text) + 1


def _parse(expression: str) -> ast.expr:
    """Check the limits, parse, and validate every node; return the expression's root."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip().translate(_TRANSLATE)
    if not text:
        raise CalculatorError("empty expression; write an arithmetic expression such as 2*(3+4)")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"expression too long ({len(text)} chars); limit is {MAX_LENGTH}")
    if text.startswith("="):
        raise CalculatorError("a leading '=' is not allowed; write only the expression, e.g. 2+2")
    try:
        with warnings.catch_warnings():  # e.g. "1if": a SyntaxWarning the user need not see
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes on Python 3.10/3.11
        shown = repr(text if len(text) <= 60 else text[:57] + "...")
        offset = getattr(exc, "offset", None)
        where = f" at position {_source_position(text, offset)}" if offset else ""
        detail = getattr(exc, "msg", str(exc))
        detail = "" if detail == "invalid syntax" else f" ({detail})"
        raise CalculatorError(f"invalid expression {shown}: syntax error{where}{detail}") from None
    nodes = 0
    stack: list[tuple[ast.expr, int]] = [(tree.body, 1)]
    while stack:  # iterative walk: no recursion however deep the tree is
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            limit = f"more than {MAX_NODES} parts" if nodes > MAX_NODES else "nested too deeply"
            raise CalculatorError(f"expression too complex ({limit}); split it into smaller steps")
        _check_node(node)
        for child in _children(node):
            chain = isinstance(node, ast.BinOp) and child is node.left  # a+b+c is not nesting
            stack.append((child, depth if chain else depth + 1))
    return tree.body


def _apply(fn: Callable[..., Any], args: list[Number], label: Callable[[], str]) -> Number:
    """Call ``fn`` and turn the expected Python errors into CalculatorError."""
    try:
        result = fn(*args)
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError(f"division by zero in {label()}") from None
    except OverflowError:
        raise CalculatorError(f"result too large: {label()} {_FLOAT_RANGE}") from None
    except ValueError:  # math domain errors
        raise CalculatorError(f"math domain error: {label()} is undefined") from None
    except TypeError as exc:  # gcd/lcm of floats
        raise CalculatorError(f"invalid argument in {label()}: {exc}") from None
    if isinstance(result, complex):
        raise CalculatorError(f"{label()} is a complex number; only real results are supported")
    if isinstance(result, float) and not math.isfinite(result):
        problem = "is not a number" if math.isnan(result) else _FLOAT_RANGE
        raise CalculatorError(f"result too large: {label()} {problem}")
    if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
        raise _too_big()
    return result  # type: ignore[no-any-return]


def _operand(value: Number) -> str:
    text = _short(value)
    return f"({text})" if text.startswith("-") else text


def _reduce(node: ast.expr, args: list[Number]) -> Number:
    """Compute one validated node from its already computed children."""
    if isinstance(node, ast.Constant):
        return node.value  # type: ignore[no-any-return]
    if isinstance(node, ast.Name):
        return CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp):
        return -args[0] if isinstance(node.op, ast.USub) else +args[0]
    if isinstance(node, ast.BinOp):
        symbol, fn = _BINOPS[type(node.op)]
        return _apply(fn, args, lambda: f"{_operand(args[0])} {symbol} {_operand(args[1])}")
    name = node.func.id  # type: ignore[attr-defined]
    return _apply(FUNCTIONS[name][0], args, lambda: f"{name}({_args_text(args)})")


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raise CalculatorError if it is invalid or too big."""
    try:
        root = _parse(expression)
        values: list[Number] = []
        todo: list[tuple[ast.expr, bool]] = [(root, False)]
        while todo:  # iterative post-order walk
            node, ready = todo.pop()
            children = _children(node)
            if children and not ready:
                todo.append((node, True))
                todo.extend((child, False) for child in reversed(children))
                continue
            args = values[len(values) - len(children) :]
            del values[len(values) - len(children) :]
            values.append(_reduce(node, args))
        return values[0]
    except CalculatorError:
        raise
    except (RecursionError, MemoryError):
        raise CalculatorError("expression too complex; split it into smaller steps") from None
    except Exception as exc:  # last resort: never let another exception reach the model
        detail = " ".join(str(exc).split())[:120]
        raise CalculatorError(f"cannot evaluate: {type(exc).__name__}: {detail}") from exc


def format_number(value: int | float) -> str:
    """Format a result: ints in full, floats with up to 12 significant digits."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # beyond Python's int/str digit limit (never from evaluate)
            return format(decimal.Decimal(value), ".12e")
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")
