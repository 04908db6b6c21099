"""Plans: load, resolve `extends`, merge overrides, apply defaults.

A plan is a list of stages (schemas/plan.schema.json). A plan that extends
another keeps the parent's stages in order; a stage of the same name overrides
the parent's (`with` merged key by key, `when` replaced, `enabled: false` drops
it) and new stages are appended. Its not_modelled list is its own or its
parent's, less the families it names under `modelled`. Every value keeps the
file and line it came from, so an expression error deep in a child plan still
points at its line.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .. import schema
from ..engine.releases import VLLM_RELEASES, supported
from ..errors import PlanError, format_path
from ..resources import resolve
from ..yamlio import Document, load_file

MAX_EXTENDS_DEPTH = 8


class Origin(NamedTuple):
    """Where a value was written: for error messages."""

    file: str
    line: int | None
    path: tuple

    def error(self, message: str) -> PlanError:
        return PlanError(message, file=self.file, line=self.line, path=format_path(self.path))


class Stage(NamedTuple):
    """One stage of a merged plan, its parameters with defaults applied."""

    name: str
    kind: str
    when: object                 # bool or expression
    params: dict                 # `with`, defaults applied
    origin: Origin               # the stage entry itself
    param_origins: dict          # param (or 'when') -> Origin

    def where(self, param: str) -> Origin:
        return self.param_origins.get(param, self.origin)


class Plan(NamedTuple):
    """A plan with its `extends` chain resolved: the stages in order, overrides merged."""

    name: str
    description: str
    stages: list
    files: list  # the extends chain, this plan first
    # What the engine warms that the plan does not model ({family, why, action}); a child plan's
    # list replaces its parent's, and its `modelled` families drop out of it. Documentation for
    # review: it shapes no step, so no digest covers it.
    not_modelled: tuple = ()
    # The vLLM release the plan mirrors (`vllm_release:`, inherited): it resolves an engine's
    # model_runner `auto` (planner/engine/vllm_choices.py). None for plans of no release.
    vllm_release: str | None = None

    def shaping_fields(self) -> list:
        """What the digest covers: every stage's kind, condition and parameters, and the release
        (it decides the model runner; absent for plans of no release, which keep their digest)."""
        stages = [{"name": s.name, "kind": s.kind, "when": s.when, "with": s.params} for s in self.stages]
        return stages + ([{"vllm_release": self.vllm_release}] if self.vllm_release else [])


def load_plan(name_or_path: str) -> Plan:
    return _load(resolve(name_or_path, "plan"), chain=())


def _load(path: str, chain: tuple) -> Plan:
    real = os.path.realpath(path)
    if real in chain:
        raise PlanError("plan extends itself (cycle: " + " -> ".join(chain + (real,)) + ")", file=path)
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise PlanError(f"extends chain deeper than {MAX_EXTENDS_DEPTH} plans", file=path)
    doc = load_file(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping (a plan with name and stages)")
    parent = None
    if "extends" in doc.data and isinstance(doc.data["extends"], str):
        parent = _load(_parent_path(doc), chain + (real,))
    _inherit_kinds(doc, parent)
    schema.validate(doc, "plan")
    return _merge(doc, parent)


def _parent_path(doc: Document) -> str:
    ref = doc.data["extends"]
    try:
        if "/" in ref or ref.endswith((".yaml", ".yml")):
            return os.path.join(os.path.dirname(doc.file), ref)
        return resolve(ref, "plan")
    except PlanError as e:
        raise doc.error(("extends",), e.message) from None


def _inherit_kinds(doc: Document, parent: Plan | None) -> None:
    """A child's override may omit `kind`: take it from the parent stage of that name."""
    stages = doc.data.get("stages")
    if not isinstance(stages, list):
        return
    inherited = {s.name: s.kind for s in parent.stages} if parent else {}
    for i, entry in enumerate(stages):
        if not isinstance(entry, dict) or "kind" in entry or not isinstance(entry.get("name"), str):
            continue  # (a name that is no string is the schema's to refuse)
        if entry["name"] in inherited:
            entry["kind"] = inherited[entry["name"]]
        else:
            raise doc.error(("stages", i), f"stage {entry['name']!r} needs a kind (it overrides no stage of "
                            + (f"{parent.name!r})" if parent else "a parent plan: this plan extends none)"))


def _merge(doc: Document, parent: Plan | None) -> Plan:
    stages = {s.name: s for s in parent.stages} if parent else {}
    order = [s.name for s in parent.stages] if parent else []
    seen: set[str] = set()
    for i, entry in enumerate(doc.data.get("stages", [])):
        name = entry["name"]
        if name in seen:
            raise doc.error(("stages", i, "name"), f"duplicate stage name {name!r}")
        seen.add(name)
        base = stages.get(name)
        if base is not None and base.kind != entry["kind"]:
            raise doc.error(("stages", i, "kind"), f"stage {name!r} is a {base.kind} in the parent plan; "
                            f"an override cannot make it a {entry['kind']}")
        if not entry.get("enabled", True):
            stages.pop(name, None)
            continue
        stages[name] = _stage(doc, i, entry, base)
        if name not in order:
            order.append(name)
    description = doc.data.get("description", parent.description if parent else "")
    files = [doc.file] + (parent.files if parent else [])
    return Plan(name=doc.data["name"], description=description,
                stages=[stages[n] for n in order if n in stages], files=files,
                not_modelled=_not_modelled(doc, parent),
                vllm_release=_vllm_release(doc, parent))


def _vllm_release(doc: Document, parent: Plan | None) -> str | None:
    """The plan's `vllm_release`, else its parent's; one with no row in the release table is refused
    (the table, planner/engine/releases.py, is the one list: the schema holds none)."""
    if "vllm_release" not in doc.data:
        return parent.vllm_release if parent else None
    version = doc.data["vllm_release"]
    if version not in VLLM_RELEASES:
        known = ", ".join(map(repr, supported()))
        raise doc.error(("vllm_release",), f"expected one of {known} (planner/engine/releases.py), got {version!r}")
    return version


def _not_modelled(doc: Document, parent: Plan | None) -> tuple:
    """The plan's own not_modelled list, else its parent's, less the families it says it models
    (`modelled`): a child that warms what its parent leaves out drops just that entry."""
    own = "not_modelled" in doc.data
    gaps = tuple(doc.data["not_modelled"]) if own else (parent.not_modelled if parent else ())
    families = {gap["family"] for gap in gaps}
    modelled = doc.data.get("modelled", [])
    for i, family in enumerate(modelled):
        if family not in families:
            whose = "this plan's" if own or parent is None else f"the one inherited from {parent.name!r}"
            raise doc.error(("modelled", i), f"{family!r} is no family of the not_modelled list ({whose})")
    return tuple(gap for gap in gaps if gap["family"] not in modelled)


def _stage(doc: Document, i: int, entry: dict, base: Stage | None) -> Stage:
    path = ("stages", i)
    params = dict(base.params) if base else {}
    origins = dict(base.param_origins) if base else {}
    for key, value in entry.get("with", {}).items():
        params[key] = value
        origins[key] = Origin(doc.file, doc.line(path + ("with", key)), path + ("with", key))
    when = base.when if base else True
    if "when" in entry:
        when = entry["when"]
        origins["when"] = Origin(doc.file, doc.line(path + ("when",)), path + ("when",))
    filled = schema.apply_defaults("plan", {"name": entry["name"], "kind": entry["kind"], "with": params},
                                   ref="#/$defs/stage")
    return Stage(name=entry["name"], kind=entry["kind"], when=when, params=filled["with"],
                 origin=Origin(doc.file, doc.line(path), path), param_origins=origins)
