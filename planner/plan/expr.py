"""A small, safe expression language for plan parameters.

Plans say *why* a number is what it is (``2 + num_speculative_tokens``,
``min(max_num_batched_tokens, max_model_len, 64)``), so parameters may be
expressions over engine names. Python's parser reads the text; this module walks
the tree and allows only: integer and boolean literals, quoted strings for
comparisons, names from the evaluation scope, ``+ - * // %``, comparisons,
``and or not``, ``a if cond else b`` and the functions below. Nothing is ever
``eval``-ed, and results are bounded so an expression cannot eat the machine.
"""

from __future__ import annotations

import ast
import operator

from kernel_model.arith import cdiv

from ..words import did_you_mean

MAX_EXPR_CHARS = 1000
MAX_ABS_INT = 1 << 62  # far above any real size; stops runaway multiplication


class ExprError(ValueError):
    """A bad expression; the caller adds file, line and YAML path."""


def round_up(x: int, multiple: int) -> int:
    return cdiv(x, multiple) * multiple


def round_down(x: int, multiple: int) -> int:
    return (x // multiple) * multiple


def next_power_of_2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def last_power_of_2(x: int) -> int:
    """Largest power of two <= x (at least 1)."""
    return 1 if x <= 1 else 1 << (x.bit_length() - 1)


def _check_divisor(b: int) -> None:
    if b == 0:
        raise ExprError("division by zero")


FUNCTIONS = {
    "min": (min, 1, None),
    "max": (max, 1, None),
    "cdiv": (cdiv, 2, 2),
    "round_up": (round_up, 2, 2),
    "round_down": (round_down, 2, 2),
    "next_power_of_2": (next_power_of_2, 1, 1),
    "last_power_of_2": (last_power_of_2, 1, 1),
    "abs": (abs, 1, 1),
}

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_SYMBOL = {ast.Div: "/", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}


def evaluate(text: str | int | bool, names: dict):
    """Value of a parameter: an int/bool literal as is, a string as an expression."""
    return trace(text, names)[0]


def trace(text: str | int | bool, names: dict) -> tuple[object, set[str]]:
    """Value of a parameter and the names it came from, so an error can blame the inputs.

    Every operand counts, as do the condition and the taken branch of ``a if c else b``,
    but of ``min`` and ``max`` only the arguments equal to the result: in
    ``min(max_num_seqs, max_num_batched_tokens // 2)`` = 0 the culprit is
    max_num_batched_tokens, not max_num_seqs.
    """
    if isinstance(text, bool) or isinstance(text, int):
        return text, set()
    if not isinstance(text, str):
        raise ExprError(f"expected an integer or an expression, got {type(text).__name__} {text!r}")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"invalid expression {text!r}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError(f"expression too deeply nested: {text[:40]!r}...") from None
    evaluator = _Evaluator(names)
    try:
        return evaluator.visit(tree.body), evaluator.read
    except RecursionError:
        raise ExprError(f"expression too deeply nested: {text[:40]!r}...") from None


class _Evaluator:
    def __init__(self, names: dict):
        self.names = names
        self.read: set[str] = set()  # names the value so far came from (see `trace`)

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise ExprError(f"{_describe(node)} is not allowed in plan expressions")
        return method(node)

    def visit_Constant(self, node):
        if isinstance(node.value, (bool, int, str)):
            return _bounded(node.value)
        raise ExprError(f"literal {node.value!r} is not allowed (integers, true/false and quoted strings only)")

    def visit_Name(self, node):
        if node.id in ("True", "true"):
            return True
        if node.id in ("False", "false"):
            return False
        if node.id not in self.names:
            raise ExprError(f"unknown name {node.id!r}{did_you_mean(node.id, self.names)}; "
                            f"known: {', '.join(sorted(self.names))}")
        self.read.add(node.id)
        return self.names[node.id]

    def visit_UnaryOp(self, node):
        value = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(node.op, ast.USub):
            return _bounded(-_int(value, "-"))
        if isinstance(node.op, ast.UAdd):
            return _int(value, "+")
        raise ExprError("operator ~ is not allowed")

    def visit_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            symbol = _SYMBOL.get(type(node.op), type(node.op).__name__)
            hint = " (use // or cdiv for integer division)" if symbol == "/" else ""
            raise ExprError(f"operator {symbol} is not allowed{hint}")
        a, b = _int(self.visit(node.left), "operand"), _int(self.visit(node.right), "operand")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            _check_divisor(b)
        return _bounded(op(a, b))

    def visit_BoolOp(self, node):
        values = [self.visit(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return all(values)
        return any(values)

    def visit_Compare(self, node):
        left = self.visit(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            cmp = _CMPOPS.get(type(op))
            if cmp is None:
                raise ExprError(f"comparison {type(op).__name__} is not allowed")
            right = self.visit(right_node)
            if isinstance(left, str) != isinstance(right, str):
                raise ExprError(f"cannot compare {left!r} with {right!r}")
            if isinstance(left, str) and cmp not in (operator.eq, operator.ne):
                raise ExprError("strings can only be compared with == and !=")
            if not cmp(left, right):
                return False
            left = right
        return True

    def visit_IfExp(self, node):
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Call(self, node):
        if not isinstance(node.func, ast.Name):
            raise ExprError(f"calling through {_describe(node.func)} is not allowed; "
                            f"functions: {', '.join(sorted(FUNCTIONS))}")
        if node.func.id not in FUNCTIONS:
            raise ExprError(f"unknown function {node.func.id!r}{did_you_mean(node.func.id, FUNCTIONS)}; "
                            f"allowed: {', '.join(sorted(FUNCTIONS))}")
        if node.keywords:
            raise ExprError(f"{node.func.id}() takes no keyword arguments")
        fn, lo, hi = FUNCTIONS[node.func.id]
        args, reads = [], []
        for arg in node.args:
            value, read = self._apart(arg)
            args.append(_int(value, node.func.id + "()"))
            reads.append(read)
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else f"at least {lo}"
            raise ExprError(f"{node.func.id}() takes {want} argument(s), got {len(args)}")
        if fn in (cdiv, round_up, round_down):
            _check_divisor(args[1])
        result = _bounded(fn(*args))
        for value, read in zip(args, reads):
            if fn not in (min, max) or value == result:
                self.read |= read
        return result

    def _apart(self, node) -> tuple[object, set[str]]:
        """Value of `node` and the names it read, kept out of `self.read` for the caller to choose."""
        outer, self.read = self.read, set()
        try:
            return self.visit(node), self.read
        finally:
            self.read = outer


def _int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExprError(f"{where} needs an integer, got {value!r}")
    return value


def _bounded(value):
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ABS_INT:
        raise ExprError(f"value {value} is out of range (|x| <= 2**62)")
    return value


def _describe(node) -> str:
    kinds = {"Attribute": "attribute access", "Subscript": "indexing", "Lambda": "lambda",
             "ListComp": "comprehension", "List": "list literal", "Tuple": "tuple literal",
             "Dict": "dict literal", "JoinedStr": "f-string", "NamedExpr": "assignment (:=)"}
    return kinds.get(type(node).__name__, type(node).__name__)
