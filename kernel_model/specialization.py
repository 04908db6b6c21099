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
