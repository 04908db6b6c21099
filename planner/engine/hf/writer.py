"""The engine config as written: the engine schema's key order (insert_after) and the YAML
(engine_to_yaml, the planner's one writer).
"""

from __future__ import annotations

from ...yamlio import dump


def insert_after(mapping: dict, after: str, key: str, value) -> dict:
    """`mapping` with key: value right after `after` (the engine schema's key order)."""
    out = {}
    for name, item in mapping.items():
        out[name] = item
        if name == after:
            out[key] = value
    return out


def engine_to_yaml(engine: dict) -> str:
    """Readable, deterministic YAML: block maps, one flow-style line per list item (planner.yamlio)."""
    return dump(engine)
