"""One ceiling division (issue 36 item 5): kernel_model.arith.cdiv, used by every floor; no module
defines its own or writes the `-(-a // b)` or `(a + b - 1) // b` idiom inline."""

from __future__ import annotations

import os
import re

from kernel_model.arith import cdiv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# -(-a // b), -(a // -b), (a + b - 1) // b and math.ceil(a / b)
INLINE = re.compile(r"-\(-[^)]*//|\(\s*\w+\s*//\s*-|\+\s*([\w.]+)\s*-\s*1\s*\)\s*//\s*\1\b|math\.ceil\([^)]*/")


def test_cdiv_rounds_up_as_vllms():
    assert [cdiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert cdiv(-3, 2) == -1  # Python's floor division, negated twice


def test_no_module_but_arith_writes_its_own():
    found = []
    for floor in ("planner", "executor", "kernel_model", "vllm_bridge"):
        for folder, _, files in os.walk(os.path.join(ROOT, floor)):
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path.endswith(os.path.join("kernel_model", "arith.py")):
                    continue
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    if re.match(r"\s*def _?cdiv\(", line) or INLINE.search(line):
                        found.append(f"{os.path.relpath(path, ROOT)}:{number}")
    assert found == []
