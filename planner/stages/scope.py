"""What a stage handler sees: its parameters, evaluated against engine names."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import Engine
from ..expr import ExprError, evaluate
from ..limits import MAX_VALUES_PER_LIST
from ..plan import Stage


@dataclass
class Scope:
    stage: Stage
    engine: Engine
    names: dict  # engine expression names (engine.expression_names())

    @property
    def params(self) -> dict:
        return self.stage.params

    def value(self, param: str, raw=None, **local):
        """Evaluate parameter `param` (or `raw`, an item of it) with extra stage-local names."""
        raw = self.stage.params[param] if raw is None else raw
        try:
            return evaluate(raw, {**self.names, **local})
        except ExprError as e:
            raise self.stage.where(param).error(str(e)) from None

    def integer(self, param: str, minimum: int = 1, raw=None, **local) -> int:
        value = self.value(param, raw, **local)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.stage.where(param).error(f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.stage.where(param).error(f"must be >= {minimum}, got {value}"
                                                + _explain(raw if raw is not None else self.params[param]))
        return value

    def flag(self, param: str, **local) -> bool:
        value = self.value(param, **local)
        if not isinstance(value, bool):
            raise self.stage.where(param).error(f"expected true or false, got {value!r}")
        return value

    def count_limit(self, param: str, what: str, count: int, limit: int = MAX_VALUES_PER_LIST) -> None:
        """Refuse a list before it is built when it would be absurdly long."""
        if count > limit:
            raise self.stage.where(param).error(
                f"{what} would have {count} entries, more than the limit of {limit}; "
                "this is almost certainly a mistake in the plan or the engine config")


def _explain(raw) -> str:
    return f" (from {raw!r})" if isinstance(raw, str) else ""


def step(name: str, kind: str, **fields) -> dict:
    """A step as handlers return it: `name` becomes the id suffix after the stage name."""
    return {"id": name, "kind": kind, **fields}
