"""Read a large expanded plan a piece at a time: what `warmup check`, `validate`, `diff` (and
`execute`) read a saved plan with.

The loader of planner.yamlio builds the whole document first, every value with its line: on a
15.5 MB plan (the `vllm` plan at the engine schema's bounds) PyYAML's node tree and the line of
each of its ~900,000 paths took 0.9 GB and 20 s before the first check ran. Here the parser's
events (libyaml's, through PyYAML's C loader) become plain data a piece at a time: each step of
`steps`, and inside a prefill or decode step each of its requests (65,536 of them in that plan).
Each piece has its integer runs expanded, is checked against its part of the schema (and, for
`warmup validate`, by the full JSON-Schema validator too) and becomes its typed record, and its
plain form is dropped. What stays is the typed plan (or what the caller keeps of each step:
`keep`), the file's text and the piece being read. A plan `warmup plan -f json` wrote is read
the same way, a value per ``json.JSONDecoder.raw_decode``.

Errors are not reported here. Anything out of the ordinary (a YAML or JSON error, an alias, a
tag, a duplicate key, a schema violation, a run over the bounds, a duplicate step id, a layout
the stream does not take, such as `format` not first) makes `expanded_plan` return None, and
the caller reads the file the classic way (planner.yamlio.load_text, planner.plan.loading),
which reports that error with its file, line and path exactly as it always has, or, finding
nothing wrong, returns the same plan. A valid file is read here; an invalid one gives the very
error it gave before (reading it a second time, the classic way, in the classic time and memory).

Checking a plan in pieces is checking it whole because of the schemas' shape, which `_Parts`
checks before it reads anything: where a piece is cut out (the items of `steps`, the items of a
prefill's or decode's `requests`), the schema around it constrains the list only by its type,
its length and one schema for every item, and nothing around it looks into the items (the
top level has no allOf, oneOf or if; a step's `if` clauses read only its `kind`).

Over 400 lines: two event readers (YAML and JSON) that feed one check of the same schema parts; they differ
only in the tokens they read.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from functools import lru_cache

from .. import progress, schema, yamlio
from ..yamlio import _JSON_PLAN_HEAD, _SCALAR_TAGS, _pyyaml, _unique_keys, expand_runs
from .expanded import FORMAT_V1, FORMATS, SCHEMAS, ExpandedPlan, from_v1
from .records import build
from .steps import KINDS, Step, step_from_dict

REPORT_EVERY = 8192  # parsed values between progress reports
STREAMED = object()  # what stands for a list whose items were read one by one
# The lists read an item at a time, by step kind: a batch's requests, the bulk of a large plan.
ITEM_LISTS = {"prefill": "requests", "decode": "requests"}
_COMBINATORS = {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired",
                "unevaluatedProperties", "unevaluatedItems", "patternProperties", "propertyNames",
                "prefixItems", "contains"}
_LIST_KEYWORDS = {"type", "items", "maxItems", "minItems", "description"}


class Fallback(Exception):
    """This file is read the classic way (see the module docstring)."""


def expanded_plan(text: str, file: str, *, strict: bool = False, keep=None) -> ExpandedPlan | None:
    """The expanded plan in `text`, read a piece at a time; None where it must be read the classic
    way: it is not an expanded plan whose first key is `format`, or something in it is wrong.
    `keep(step)`: what the plan holds of each typed step (the step itself by default)."""
    task = progress.current()
    try:
        return read(text, file, strict=strict, keep=keep, task=task)
    except Exception:  # noqa: BLE001 - Fallback, or anything else: the classic reader meets it too, and says it
        return None
    finally:
        task.phase("")


def read(text: str, file: str, *, strict: bool = False, keep=None, task=None) -> ExpandedPlan:
    """expanded_plan, but raising Fallback (or what went wrong) where it would return None."""
    if text.startswith(_JSON_PLAN_HEAD):
        reader = _JsonReader(text)
    elif _YAML_HEAD.match(text, 0, 4096):
        reader = _YamlReader(text)
    else:
        raise Fallback
    task = progress.current() if task is None else task
    task.phase(f"reading {os.path.basename(file)}", total=len(text))
    plan = _Plan(strict, keep, task)
    reader.read(plan)
    return plan.result()


# What `warmup plan` writes first (after its comment lines): the format, naming an expanded plan.
_YAML_HEAD = re.compile(r"(?:#[^\n]*\n|\s)*format: *\"?warmup-expanded-plan/")


# --- the plan, a piece at a time ------------------------------------------------------------------

class _Plan:
    """The typed plan, built from what a reader gives: the top level's keys and values, and each
    step (a _Step) of `steps`."""

    def __init__(self, strict: bool, keep, task):
        self.strict, self.keep, self.task = strict, keep, task
        self.budget = [yamlio.MAX_TOTAL_VALUES]  # the values in runs of the whole plan (yamlio.decompress)
        self.parts: _Parts | None = None  # the schema in pieces, once the format is known
        self.header: dict = {}
        self.steps: list = []
        self.ids: set = set()

    def key(self, key: str, value) -> None:
        """A key of the top level and its value (STREAMED for `steps`, read by `step`)."""
        if key in self.header:
            raise Fallback
        if not self.header:  # the first key: the format, which says how steps are read
            if key != "format" or value not in FORMATS:
                raise Fallback
            self.parts = _parts(SCHEMAS[value])
            self.read_step = from_v1 if value == FORMAT_V1 else step_from_dict
        self.header[key] = value

    def step(self) -> "_Step":
        return _Step(self)  # (the format came first: the readers start at it)

    def add(self, value: dict, lists: dict) -> None:
        """A step read whole but for `lists` (key -> its items, typed), once checked."""
        parts = self.parts
        value = _expand(value, 2, self.budget)
        shown = {**value, **{key: [None] * len(items) for key, items in lists.items()}}
        _check(parts.step_without_items if lists else parts.step, shown, parts, self.strict)
        if value.get("id") in self.ids:
            raise Fallback
        self.ids.add(value["id"])
        if lists:  # Step.from_dict, with the lists' records already built
            cls = KINDS[value["kind"]]
            nested = {k: make for k, make in cls.NESTED.items() if k not in lists}
            body = {**{k: v for k, v in value.items() if k != "kind"}, **{k: tuple(v) for k, v in lists.items()}}
            step = build(cls, body, nested)
        else:
            step = self.read_step(value)
        self.steps.append(step if self.keep is None else self.keep(step))

    def result(self) -> ExpandedPlan:
        header = self.header
        if header.get("steps") is not STREAMED:  # missing, or not a list: the classic check says so
            raise Fallback
        for key, value in header.items():
            if key != "steps":
                header[key] = _expand(value, 1, self.budget)
        _check(self.parts.top, {**header, "steps": [None] * len(self.steps)}, self.parts, self.strict)
        return ExpandedPlan.from_dict({**header, "steps": []})._replace(steps=tuple(self.steps))


class _Step:
    """One step being read: its keys and values, and the items of its ITEM_LISTS list, each
    checked and typed as it comes."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.value: dict = {}
        self.lists: dict = {}

    def key(self, key: str, value) -> None:
        if key in self.value:
            raise Fallback
        self.value[key] = value

    def streams(self, key: str) -> bool:
        """Whether the list at `key` is read an item at a time: a prefill's or decode's requests,
        its kind read first (as `warmup plan` writes it)."""
        kind = self.value.get("kind")
        return type(kind) is str and ITEM_LISTS.get(kind) == key and kind in self.plan.parts.items

    def item(self, key: str, value) -> None:
        plan = self.plan
        schema_, make = plan.parts.items[self.value["kind"]]
        value = _expand(value, 4, plan.budget)
        _check(schema_, value, plan.parts, plan.strict)
        self.lists.setdefault(key, []).append(make(value))

    def end(self) -> None:
        lists = {key: self.lists.get(key, []) for key, value in self.value.items() if value is STREAMED}
        for key in lists:
            del self.value[key]
        self.plan.add(self.value, lists)


def _check(node: dict, value, parts: "_Parts", strict: bool) -> None:
    """Fallback unless `value` is valid against `node` (a schema of parts.root, or of
    parts.without_items), by the subset validator and, where strict, by jsonschema's."""
    root = parts.without_items if node is parts.step_without_items else parts.root
    try:
        schema._check(node, value, (), root)
    except schema.SchemaViolation:
        raise Fallback from None
    if strict and next(parts.validator(node).iter_errors(value), None) is not None:
        raise Fallback


class _Parts:
    """An expanded-plan schema in the pieces the stream checks apart, checked to be cut where the
    module docstring says it may be:

        top                  the top level, its `steps` without items
        step                 one item of `steps`
        step_without_items   the same, a prefill's or decode's `requests` without items (in
                             without_items, a copy of the schema)
        items                kind -> (the schema of one of its requests, how it is typed)
    """

    def __init__(self, name: str):
        root = self.root = schema.load_schema(name)
        steps = root.get("properties", {}).get("steps", {})
        if _COMBINATORS & set(root) or not _cuttable(steps):
            raise Fallback
        self.top = {**root, "properties": {**root["properties"], "steps": _without_items(steps)}}
        self.step = steps["items"]
        self.without_items = copy.deepcopy(root)
        self.step_without_items = copy.deepcopy(self.step)
        self.items = {}
        self.validators: dict = {}
        step = schema._deref(self.step, root)
        if set(step) - {"type", "required", "properties", "allOf"} or "kind" not in step.get("properties", {}):
            return  # no lists are read an item at a time
        for clause in step.get("allOf", ()):
            kind = _kind_of_if(clause)
            if kind is None:
                self.items = {}
                return
            key = ITEM_LISTS.get(kind)
            target = _defs_ref(clause.get("then"), root)
            if key is None or target is None or kind not in KINDS or KINDS[kind].from_dict.__func__ is not \
                    Step.from_dict.__func__ or key not in KINDS[kind].NESTED:
                continue
            then = root["$defs"][target]
            lists = then.get("properties", {}).get(key)
            if not isinstance(lists, dict) or not _cuttable(lists) or _COMBINATORS & set(then) or \
                    json.dumps(root).count(f'"#/$defs/{target}"') != 1:
                continue
            self.without_items["$defs"][target]["properties"][key] = _without_items(lists)
            self.items[kind] = (lists["items"], KINDS[kind].NESTED[key])

    def validator(self, node: dict):
        """jsonschema's validator for `node` (`warmup validate` only), made on first use."""
        found = self.validators.get(id(node))
        if found is None:
            import jsonschema

            root = self.without_items if node is self.step_without_items else self.root
            whole = {"$schema": root.get("$schema"), "$defs": root.get("$defs", {}), **node}
            found = self.validators[id(node)] = jsonschema.validators.validator_for(whole)(whole)
        return found


@lru_cache(maxsize=None)
def _parts(name: str) -> _Parts:
    return _Parts(name)


def _cuttable(node: dict) -> bool:
    """A list schema that constrains the list by its type and length, and its items by `items`."""
    return set(node) <= _LIST_KEYWORDS and "items" in node and node.get("type", "array") == "array"


def _without_items(node: dict) -> dict:
    return {k: v for k, v in node.items() if k != "items"}


def _kind_of_if(clause: dict) -> str | None:
    """K for a clause `if: {properties: {kind: {const: K}}}, then: ...` (reading nothing but kind)."""
    test = clause.get("if")
    if set(clause) != {"if", "then"} or not isinstance(test, dict) or set(test) != {"properties"}:
        return None
    props = test["properties"]
    if set(props) != {"kind"} or set(props["kind"]) != {"const"} or not isinstance(props["kind"]["const"], str):
        return None
    return props["kind"]["const"]


def _defs_ref(node, root: dict) -> str | None:
    """X for a node that is only {"$ref": "#/$defs/X"}."""
    if not isinstance(node, dict) or set(node) != {"$ref"} or not str(node["$ref"]).startswith("#/$defs/"):
        return None
    name = node["$ref"][len("#/$defs/"):]
    return name if "/" not in name and name in root.get("$defs", {}) else None


def _expand(value, depth: int, budget: list):
    """yamlio.decompress in place: every list's integer runs expanded, each measured first; any
    run or list over the bounds, or nesting past MAX_DEPTH, falls back (which reports it)."""
    kind = type(value)
    if kind is dict:
        if value and depth >= yamlio.MAX_DEPTH:
            raise Fallback  # its values would be nested deeper than MAX_DEPTH
        for key, item in value.items():
            if type(item) is dict or type(item) is list:
                value[key] = _expand(item, depth + 1, budget)
    elif kind is list:
        if value and depth >= yamlio.MAX_DEPTH:
            raise Fallback
        if len(value) > yamlio.MAX_VALUES_PER_LIST or str in set(map(type, value)):
            try:
                value = expand_runs(value, (), budget)
            except ValueError:  # RunError
                raise Fallback from None
        for i, item in enumerate(value):
            if type(item) is dict or type(item) is list:
                value[i] = _expand(item, depth + 1, budget)
    return value


# --- YAML ----------------------------------------------------------------------------------------

_STR = "tag:yaml.org,2002:str"
_UNKNOWN = object()
_DECIMAL = re.compile(r"-?[1-9][0-9]*|0")  # a plain scalar YAML 1.1 resolves to int, read alike by int()


class _YamlReader:
    """Plain data from libyaml's events, held to planner.yamlio's rules (any break of them falls
    back, and the classic loader names it)."""

    def __init__(self, text: str):
        yaml, loader = _pyyaml()
        self.yaml = yaml
        self.loader = loader(text)
        self.next = self.loader.get_event
        # A plain scalar whose first character no implicit resolver claims is a string: what
        # Resolver.resolve finds after trying none (most keys and names of a plan).
        resolvers = self.loader.yaml_implicit_resolvers
        self.claimed = None if None in resolvers or self.loader.yaml_path_resolvers else set(resolvers)
        self.constructor = yaml.SafeLoader("")
        self.plain: dict = {}  # a plain scalar's text -> its value (keys and the like, resolved once)
        self.count = 0

    def read(self, plan: _Plan) -> None:
        yaml = self.yaml
        self.task = plan.task
        try:
            self._expect(yaml.StreamStartEvent)
            self._expect(yaml.DocumentStartEvent)
            if type(self.next()) is not yaml.MappingStartEvent:
                raise Fallback
            while type(event := self.next()) is not yaml.MappingEndEvent:
                key = self._key(event)
                event = self.next()
                if key == "steps" and type(event) is yaml.SequenceStartEvent:
                    while type(event := self.next()) is not yaml.SequenceEndEvent:
                        self._step(event, plan.step())
                    plan.key(key, STREAMED)
                else:
                    plan.key(key, self._node(event, 1))
            self.next()  # the document's end
            self._expect(yaml.StreamEndEvent)  # a second document: yaml.compose refuses it
        except yaml.YAMLError:
            raise Fallback from None

    def _step(self, event, step: _Step) -> None:
        yaml = self.yaml
        if type(event) is not yaml.MappingStartEvent:
            raise Fallback  # a step that is no mapping: the schema says so
        while type(event := self.next()) is not yaml.MappingEndEvent:
            key = self._key(event)
            event = self.next()
            if type(event) is yaml.SequenceStartEvent and step.streams(key):
                while type(event := self.next()) is not yaml.SequenceEndEvent:
                    step.item(key, self._node(event, 4))
                step.key(key, STREAMED)
            else:
                step.key(key, self._node(event, 3))
        step.end()

    def _expect(self, kind) -> None:
        if type(self.next()) is not kind:
            raise Fallback

    def _key(self, event) -> str:
        if type(event) is not self.yaml.ScalarEvent:
            raise Fallback
        key = self._scalar(event)
        if type(key) is not str:
            raise Fallback
        return key

    def _node(self, event, depth: int):
        yaml = self.yaml
        self.count += 1
        if not self.count % REPORT_EVERY:
            self.task.update(event.start_mark.index)
        kind = type(event)  # (nesting past MAX_DEPTH falls back in _expand)
        if kind is yaml.ScalarEvent:
            return self._scalar(event)
        if kind is yaml.SequenceStartEvent:
            items, end, node = [], yaml.SequenceEndEvent, self._node
            while type(event := self.next()) is not end:
                items.append(node(event, depth + 1))
            return items
        if kind is yaml.MappingStartEvent:
            out, end = {}, yaml.MappingEndEvent
            while type(event := self.next()) is not end:
                key = self._key(event)
                if key in out:
                    raise Fallback
                out[key] = self._node(self.next(), depth + 1)
            return out
        raise Fallback  # an alias (yamlio refuses them; the classic loader says so)

    def _scalar(self, event):
        """The value yamlio's builder makes of a scalar (yaml.compose's tag, SafeConstructor's value)."""
        tag, value = event.tag, event.value
        if tag is not None and tag != "!":  # an explicit tag
            return self._constructed(tag, value, event)
        implicit = event.implicit
        if not implicit[0]:  # quoted, or a block scalar: no implicit resolver runs
            return self._constructed(self.loader.resolve(self.yaml.ScalarNode, value, implicit), value, event)
        if _DECIMAL.fullmatch(value):
            return int(value)
        if value and self.claimed is not None and value[0] not in self.claimed:
            return value
        known = self.plain.get(value, _UNKNOWN)
        if known is _UNKNOWN:
            tag = self.loader.resolve(self.yaml.ScalarNode, value, implicit)
            known = self._constructed(tag, value, event)
            if len(self.plain) < 4096 and len(value) < 64:
                self.plain[value] = known
        return known

    def _constructed(self, tag: str, value: str, event):
        if tag == _STR:
            return value
        if tag not in _SCALAR_TAGS:
            raise Fallback
        node = self.yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        try:  # the constructor's own method: construct_object would keep every node it made
            value = self.constructor.yaml_constructors[tag](self.constructor, node)
        except (self.yaml.YAMLError, ValueError, TypeError):
            raise Fallback from None
        if type(value) is float and not math.isfinite(value):
            raise Fallback
        return value


# --- JSON ----------------------------------------------------------------------------------------

_SPACE = re.compile(r"[ \t\n\r]*")


class _JsonReader:
    """A JSON plan a value at a time (raw_decode), each step key by key and each request by
    itself; yamlio.load_json's rules (unique keys, no NaN or infinities) fall back."""

    def __init__(self, text: str):
        self.text = text
        self.decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_refuse,
                                        parse_float=_finite)

    def read(self, plan: _Plan) -> None:
        def top(key, at):
            if key == "steps" and self.text.startswith("[", at):
                at = self._array(at, lambda at: self._object(at, plan.step()))
                plan.key(key, STREAMED)
                return at
            value, at = self._value(at)
            plan.key(key, value)
            return at

        at = self._pairs(_SPACE.match(self.text).end(), top)
        if _SPACE.match(self.text, at).end() != len(self.text):
            raise Fallback  # json.loads: extra data

    def _object(self, at: int, step: _Step) -> int:
        def pair(key, at):
            if self.text.startswith("[", at) and step.streams(key):
                at = self._array(at, lambda at: self._item(at, step, key))
                step.key(key, STREAMED)
                return at
            value, at = self._value(at)
            step.key(key, value)
            return at

        at = self._pairs(at, pair)
        step.end()
        step.plan.task.update(at)
        return at

    def _item(self, at: int, step: _Step, key: str) -> int:
        value, at = self._value(at)
        step.item(key, value)
        return at

    def _value(self, at: int):
        try:
            return self.decoder.raw_decode(self.text, at)
        except ValueError:  # JSONDecodeError, a duplicate key, an integer too long
            raise Fallback from None

    def _skip(self, at: int, expected: str) -> int:
        """Past `expected` (and the whitespace after it), which must come next."""
        if not self.text.startswith(expected, at):
            raise Fallback
        return _SPACE.match(self.text, at + 1).end()

    def _pairs(self, at: int, on_pair) -> int:
        """An object's key-value pairs, each value read by on_pair(key, at) -> its end; the end of
        the object."""
        at = self._skip(at, "{")
        if self.text.startswith("}", at):
            return at + 1
        while True:
            key, at = self._value(at)
            if type(key) is not str:
                raise Fallback
            at = on_pair(key, self._skip(_SPACE.match(self.text, at).end(), ":"))
            at = _SPACE.match(self.text, at).end()
            if self.text.startswith("}", at):
                return at + 1
            at = self._skip(at, ",")

    def _array(self, at: int, on_item) -> int:
        """An array's items, each read by on_item(at) -> its end; the end of the array."""
        at = self._skip(at, "[")
        if self.text.startswith("]", at):
            return at + 1
        while True:
            at = _SPACE.match(self.text, on_item(at)).end()
            if self.text.startswith("]", at):
                return at + 1
            at = self._skip(at, ",")


def _refuse(token: str):
    raise Fallback


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise Fallback
    return value
