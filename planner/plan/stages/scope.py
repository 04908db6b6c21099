"""What a stage handler sees: its parameters, evaluated against engine names."""

from __future__ import annotations

from ...engine.config import Engine
from ...engine.facts import EngineFacts
from ...engine.queries import planned_around
from ...errors import PlanError, location
from ...limits import MAX_VALUES_PER_LIST
from ..authored import Stage
from ..expr import ExprError, trace


class Scope:
    """One stage being expanded: its parameters, the engine's names, what each value came from."""

    __slots__ = ("stage", "engine", "names", "sources", "tables", "notes")

    def __init__(self, stage: Stage, engine: Engine, names: dict, tables=None, notes=None):
        self.stage, self.engine = stage, engine
        self.names = names  # engine expression names (engine.expression_names())
        # param -> the engine names its value came from, so a refused value blames the engine
        # file when an engine field made it absurd, and the plan when only the plan did.
        self.sources: dict = {}
        # Tuned kernel config tables (planner.tables.kernel_configs.TableReader): an input of
        # planning wherever a kernel's dispatch depends on them.
        self.tables = tables
        # What the stages of one expansion add to the plan besides steps (Notes).
        self.notes = notes if notes is not None else Notes()

    @property
    def params(self) -> dict:
        return self.stage.params

    def new(self, cls, name: str, **fields):
        """A step of this stage: `name` becomes its id after the stage name (STAGE/NAME)."""
        return cls(id=f"{self.stage.name}/{name}", stage=self.stage.name, **fields)

    def value(self, param: str, raw=None, **local):
        """Evaluate parameter `param` (or `raw`, an item of it) with extra stage-local names."""
        return self._traced(param, raw, local)[0]

    def integer(self, param: str, minimum: int = 1, raw=None, **local) -> int:
        value, engine_names = self._traced(param, raw, local)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.stage.where(param).error(f"expected an integer, got {value!r}")
        if value < minimum:
            message = f"must be >= {minimum}, got {value}" + _explain(raw if raw is not None else self.params[param])
            raise self._refuse(param, message, f"{param} {message}", engine_names)
        return value

    def flag(self, param: str, **local) -> bool:
        value = self.value(param, **local)
        if not isinstance(value, bool):
            raise self.stage.where(param).error(f"expected true or false, got {value!r}")
        return value

    def choice(self, param: str, choices: tuple) -> str:
        """A parameter that names one of `choices`: written as the name itself (`v2`), or an
        expression that gives it as a string ("'v1' if model_runner == 'v1' else 'v2'")."""
        raw = self.params[param]
        value = raw if raw in choices else self.value(param)
        if value not in choices:
            raise self.stage.where(param).error(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def count_limit(self, param: str, what: str, count: int, limit: int = MAX_VALUES_PER_LIST) -> None:
        """Refuse a list before it is built when it would be absurdly long."""
        if count > limit:
            raise self._refuse(
                param,
                f"{what} would have {count} entries, more than the limit of {limit}; "
                "this is almost certainly a mistake in the plan or the engine config",
                f"{param} gives {what} {count:,} entries, more than the limit of {limit:,}",
                self.sources.get(param, set()))

    def _traced(self, param: str, raw, local: dict) -> tuple[object, set[str]]:
        """Value of `param` (or of `raw`) and the engine names it came from, remembered per param."""
        raw = self.stage.params[param] if raw is None else raw
        try:
            value, read = trace(raw, {**self.names, **local})
        except ExprError as e:
            raise self.stage.where(param).error(str(e)) from None
        engine_names = set()
        for name in read:
            # A stage-local name is an earlier parameter's value (prompt_len in decode_len):
            # it brings that parameter's engine names. Other locals come from no parameter.
            engine_names |= self.sources.get(name, set()) if name in local else {name}
        self.sources.setdefault(param, set()).update(engine_names)
        return value, engine_names

    def _refuse(self, param: str, plan_message: str, engine_message: str, engine_names: set) -> PlanError:
        """The error for a refused value: at the engine fields it came from, else at the plan."""
        where = self.stage.where(param)
        if not engine_names:
            return where.error(plan_message)
        return self.engine.blame(engine_names, f"in the {self.stage.name} stage "
                                               f"({location(where.file, where.line)}), {engine_message}")


class Notes:
    """Shared by the stages of one expansion: the plan's not_modelled entries a stage found
    (``gaps``) and vLLM's fused_moe tables it read (``moe_tables``, planner.tables.vllm_moe.MoeTables,
    made on first use)."""

    __slots__ = ("gaps", "moe_tables", "around")

    def __init__(self):
        self.gaps: list = []
        self.moe_tables = None
        self.around: list = []  # the layers planned around (plan_around), in the order found

    def plan_around(self, engine: EngineFacts, sections=("linear", "moe")) -> None:
        """The plan's not-modelled entry for the layers of `sections` that a GEMM stage leaves out
        because no kernel it models takes their K (planner.engine.queries.planned_around): one entry per
        expansion, naming every such layer any of its stages left out."""
        found = [layer for layer in planned_around(engine) if layer.section in sections]
        if not found:
            return
        at = next((i for i, gap in enumerate(self.gaps) if gap["family"] == PLANNED_AROUND), len(self.gaps))
        self.around = list(dict.fromkeys(self.around + found))
        self.gaps[at:at + 1] = [planned_around_gap(self.around)]

    def moe_read(self) -> dict:
        """{table file name: digest or None} of the fused_moe tables read, for the plan's inputs."""
        return dict(sorted(self.moe_tables.read.items())) if self.moe_tables is not None else {}


PLANNED_AROUND = "block-FP8 GEMMs of a K that is not whole FP8 blocks"


def planned_around_gap(layers) -> dict:
    named = ", ".join(layer.describe() for layer in layers)
    return {"family": PLANNED_AROUND,
            "why": f"the layers {named} have a K that is not a whole number of their {layers[0].block_k}-wide FP8 "
                   "scale blocks: DeepGEMM and the Triton block-FP8 GEMMs this planner models read K one block at "
                   "a time and take no other K, so the plan has no GEMM step for them (vLLM serves them on its "
                   "Triton or CUTLASS block-FP8 GEMM where tensor parallelism does not split K)",
            "action": "none to take in the plan: the first forward that reaches these layers compiles or loads "
                      "vLLM's kernel for them; check the first requests with vLLM's JIT monitor"}


def _explain(raw) -> str:
    return f" (from {raw!r})" if isinstance(raw, str) else ""


