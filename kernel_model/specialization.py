"""Triton 3.6's specialization of integer arguments.

Source: triton-lang/triton v3.6.0, python/src/specialize.cc `native_specialize_impl` (the
value and alignment rules) and python/triton/runtime/jit.py `create_function_from_signature`
(``do_not_specialize``, ``do_not_specialize_on_alignment``).

An int argument enters a kernel's compile key as ``constexpr=1`` when it is 1, else as
its type (i32 / i64 / u64) plus ``D`` when it is a multiple of 16; in
``do_not_specialize`` only the type remains. So M = 1, 16 and 17 are three compiles of
a kernel that specializes M, and one of a kernel that does not.
"""

from __future__ import annotations

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def int_spec(value: int, specialize: bool = True) -> str:
    """The signature entry Triton derives from an int argument."""
    if specialize and value == 1:
        return "constexpr=1"
    if INT32_MIN <= value <= INT32_MAX:
        kind = "i32"
    else:
        kind = "i64" if value < 2**63 else "u64"
    return kind + ("D" if specialize and value % 16 == 0 else "")


# --- the generic variant a launch may run instead of compiling -------------------------------------------
#
# A launch's specialization (Triton's binder, jit.py ``create_function_from_signature``) is one
# (type, class) entry per parameter: ('i32', 'D') an int that is a multiple of 16, ('i32', '') any
# other, ('constexpr', 1) an int equal to 1 (folded into the kernel), ('*fp32', 'D') a 16-byte
# aligned pointer, ('*fp32', '') any other; a declared tl.constexpr is ('constexpr', value) and a
# None argument ('constexpr', None); a tuple argument is (types, classes) with one entry per item.
# The classes only add facts the compiler may use (divisibility, a value of 1): the variant compiled
# without them, same types and same constexprs, computes the same result for every value of each
# class. That variant is the one a miss after ready can run instead of compiling.

GENERIC_INT = ""       # the class of an int that is neither 1 nor a multiple of 16
DIVISIBLE = "D"        # Triton's mark of a multiple of 16 (ints) or a 16-byte aligned address (pointers)
FOLDED_ONE_TYPE = "i32"  # an int equal to 1 is folded as ('constexpr', 1); unfolded, 1 is an i32


def _is_int_type(ty) -> bool:
    return isinstance(ty, str) and ty[:1] in ("i", "u") and ty[1:].isdigit() and ty != "u1"


def _is_pointer_type(ty) -> bool:
    return isinstance(ty, str) and ty.startswith("*")


def generic_entry(entry: tuple) -> tuple:
    """One parameter's entry with the facts a value class adds taken out; a tuple argument item by
    item. Anything else (a declared constexpr, a None, a float, a bool, a descriptor) is kept."""
    ty, cls = entry[0], entry[1]
    if isinstance(ty, tuple):
        items = tuple(generic_entry((t, c)) for t, c in zip(ty, cls))
        return tuple(t for t, _ in items), tuple(c for _, c in items)
    if ty == "constexpr" and cls == 1 and not isinstance(cls, bool):
        return FOLDED_ONE_TYPE, GENERIC_INT
    if _is_pointer_type(ty) and cls == DIVISIBLE:
        return ty, GENERIC_INT
    if _is_int_type(ty) and (cls == DIVISIBLE or (isinstance(cls, int) and not isinstance(cls, bool))):
        return ty, GENERIC_INT  # an annotated int param that was 1 carries the value itself
    return tuple(entry)


def generic_specialization(specialization, declared_constexpr) -> list:
    """The launch's specialization with every value class generalised (``generic_entry``); a
    parameter declared ``tl.constexpr`` (``declared_constexpr[i]``) keeps its value: it selects
    another program, not a class of values."""
    return [tuple(entry) if declared else generic_entry(entry)
            for entry, declared in zip(specialization, declared_constexpr)]
