"""The one digest of a JSON-like value: sha256 of its canonical JSON. planner.plan.digest makes a plan's
input digests with it; planner.tables.vllm_moe hashes vLLM's fused_moe tables with it (a module of its own,
below both, so that neither imports the other for it)."""

from __future__ import annotations

import json

# The interpreter's own SHA-256, imported directly as the standard library's random.py does with
# _sha512: hashlib loads OpenSSL first, a measurable share of `warmup plan` (bench/RESULTS.md,
# part A4). The digests are the same.
try:
    from _sha256 import sha256  # Python <= 3.11
except ImportError:
    try:
        from _sha2 import sha256  # Python >= 3.12
    except ImportError:
        from hashlib import sha256


def digest(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + sha256(text.encode()).hexdigest()
