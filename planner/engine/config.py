"""Engine config: load, validate, apply defaults, check cross-field facts.

The engine config is what the serving engine is, as the warmup sees it on one
rank (schemas/engine.schema.json). Plans refer to its fields through the flat
names of planner/engine/names.py, which follow vLLM's vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import schema
from ..errors import PlanError, format_path
from ..resources import resolve
from ..words import count
from ..yamlio import Document, load_file
from .facts import EngineFacts, engine_facts, quant_of
from .names import EXPRESSION_FIELDS, expression_names
from .vllm_choices import default_linear_kernel

# Cosmetic fields: they name or describe the engine but shape no step.
COSMETIC_KEYS = ("name", "description")


class Engine(NamedTuple):
    """A loaded engine config."""

    doc: Document        # where every value came from, for error messages
    data: dict           # canonical form: schema defaults applied
    facts: EngineFacts   # the same, as a typed record: what readers outside the engine modules use

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def file(self) -> str:
        return self.doc.file

    def shaping_fields(self) -> dict:
        """Everything that can shape a plan (the digest covers exactly this), in one form whether
        the file writes vLLM's default choices or leaves them out (canonical_choices)."""
        return canonical_choices({k: v for k, v in self.data.items() if k not in COSMETIC_KEYS})

    def expression_names(self, release: str | None = None) -> dict:
        """The names plans use; `release`: the vLLM release the plan mirrors (it resolves
        model_runner `auto`, planner/engine/vllm_choices.py)."""
        return expression_names(self.facts, release)

    def blame(self, names, message: str) -> PlanError:
        """An error caused by the engine fields behind expression `names`, in one line.

        Located at the first field the file sets; every field is named with its value,
        so the user sees which of their numbers to change.
        """
        paths = sorted({path for name in names for path in EXPRESSION_FIELDS[name]},
                       key=lambda path: (not self._written(path), self.doc.lines.get(path, 0), path))
        fields = [self._describe(path, first=i == 0) for i, path in enumerate(paths)]
        return PlanError(message, file=self.file, line=self.doc.line(paths[0]), path=", ".join(fields))

    def layer_error(self, section: str, name: str, key: str, message: str) -> PlanError:
        """An error at field `key` of the layer called `name` in model.`section` (linear, moe, attention)."""
        index = next(i for i, item in enumerate(self.data["model"][section]) if item["name"] == name)
        return self.doc.error(("model", section, index, key), message)

    def _written(self, path: tuple) -> bool:
        """Whether the file sets `path` (otherwise its value is the schema default)."""
        value = self.doc.data
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return False
            value = value[key]
        return True

    def _describe(self, path: tuple, first: bool) -> str:
        """'scheduler.max_num_seqs = 1024 (line 25)': the field, its value, and where it is."""
        value = self.data
        for key in path:
            value = value[key]
        text = format_path(path)
        if isinstance(value, list):  # kv_cache.groups, behind num_kv_cache_groups
            text += f" ({count(len(value), 'entry', 'entries')})"
        else:
            text += f" = {value!r}"
        if not self._written(path):
            return text + " (default)"
        line = self.doc.lines.get(path)
        if first or line is None:  # the first field's line leads the message already
            return text
        return f"{text} (line {line})"


def load_engine(name_or_path: str) -> Engine:
    doc = load_file(resolve(name_or_path, "engine"))
    return engine_from_document(doc)


def engine_from_document(doc: Document) -> Engine:
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping (an engine config)")
    schema.validate(doc, "engine")
    data = schema.apply_defaults("engine", doc.data)
    check_consistency(doc, data)
    _fill_linear_kernels(data)
    return Engine(doc=doc, data=data, facts=engine_facts(data))


def _fill_linear_kernels(data: dict) -> None:
    """A block-FP8 linear whose kernel the file leaves out gets vLLM's choice with FlashInfer
    installed (planner/engine/vllm_choices.py), so every plan reads one fact per layer."""
    for layer in data["model"]["linear"]:
        if "kernel" not in layer:
            kernel = default_linear_kernel(layer, data["model"]["dtype"], data["device"]["capability"])
            if kernel is not None:
                layer["kernel"] = kernel


def canonical_choices(data: dict) -> dict:
    """`data` without the start-up choices that are vLLM's default for the engine: model_runner
    `auto` and a block-FP8 linear's kernel where it is the one planner/engine/vllm_choices.py fills in.
    Written or left out, they mean the same engine, so they give one digest, the digest engines had
    before the fields existed (plans saved then stay fresh); any other value is covered."""
    model = dict(data["model"])
    for choice in ("model_runner", "sampler"):
        if model.get(choice) == "auto":
            del model[choice]
    capability = data["device"]["capability"]
    model["linear"] = [_without_default_kernel(layer, model["dtype"], capability) for layer in model["linear"]]
    return {**data, "model": model}


def _without_default_kernel(layer: dict, dtype: str, capability: str) -> dict:
    if "kernel" in layer and layer["kernel"] == default_linear_kernel(layer, dtype, capability):
        return {k: v for k, v in layer.items() if k != "kernel"}
    return layer


def check_consistency(doc: Document, d: dict) -> None:
    """Facts the schema cannot say: combinations that no real engine has (`d`: the document's
    data with the schema's defaults applied)."""
    par, spec, sched = d["parallel"], d["speculative"], d["scheduler"]
    if par["pipeline_rank"] >= par["pipeline_parallel_size"]:
        raise doc.error(("parallel", "pipeline_rank"),
                        f"pipeline_rank {par['pipeline_rank']} must be < pipeline_parallel_size "
                        f"{par['pipeline_parallel_size']}")
    if (spec["method"] == "none") != (spec["num_speculative_tokens"] == 0):
        raise doc.error(("speculative",), "method 'none' goes with num_speculative_tokens 0, and any "
                        f"other method with at least 1 (got {spec['method']!r}, {spec['num_speculative_tokens']})")
    if sched["max_num_batched_tokens"] < sched["max_num_seqs"]:
        raise doc.error(("scheduler", "max_num_batched_tokens"),
                        f"max_num_batched_tokens ({sched['max_num_batched_tokens']}) must be >= max_num_seqs "
                        f"({sched['max_num_seqs']}), as vLLM requires")
    _check_unique_names(doc, d["model"])
    for i, attn in enumerate(d["model"]["attention"]):
        _check_attention(doc, d, i, attn)
    for section in ("linear", "moe"):
        for i, layer in enumerate(d["model"][section]):
            quant = quant_of(layer)
            if quant.block and quant.method not in ("fp8", "int8"):
                raise doc.error(("model", section, i, "quant", "weight_block_size"),
                                "weight_block_size applies to block-quantized (fp8) weights only")
            if quant.block and quant.method == "fp8":
                _check_fp8_blocks(doc, section, i, layer, par["tensor_parallel_size"])
            elif "kernel" in layer:
                raise doc.error(("model", section, i, "kernel"), "kernel names the kernel of a block-FP8 "
                                "linear (quant method fp8 with a weight_block_size); this layer is not one")
    for i, group in enumerate(d["kv_cache"]["groups"]):
        if group["kind"] == "cross_attention" and d["model"]["max_encoder_len"] == 0:
            raise doc.error(("kv_cache", "groups", i, "kind"),
                            "a cross_attention KV group needs model.max_encoder_len > 0")


def _check_fp8_blocks(doc: Document, section: str, i: int, layer: dict, tp: int) -> None:
    """A block-FP8 MoE weight in whole blocks where vLLM needs it: vLLM refuses an intermediate_size
    that is not whole blocks of N, and of K under tensor parallelism (validate_fp8_block_shape_moe).

    A linear's K is not checked: vLLM serves a K that is not whole blocks where tensor parallelism
    does not split it (on its Triton or CUTLASS block-FP8 GEMM), and the engine file describes one
    rank, not which linears are row-parallel. No GEMM kernel the plans model takes such a K, so every
    plan plans around the layer and names it (planner.engine.queries.planned_around, lint W206)."""
    if section != "moe":
        return
    block_n, block_k = quant_of(layer).block
    size = layer["intermediate_size"]
    if size % block_n or (tp > 1 and size % block_k):
        dim, split = ("N", "") if size % block_n else ("K", f" under tensor_parallel_size {tp}")
        raise doc.error(("model", "moe", i, "intermediate_size"),
                        f"intermediate_size = {size} is not a whole number of FP8 blocks of {dim} "
                        f"(weight_block_size [{block_n}, {block_k}]){split}: vLLM refuses it")


def _check_unique_names(doc: Document, model: dict) -> None:
    for section in ("linear", "moe", "attention"):
        seen: set[str] = set()
        for i, item in enumerate(model[section]):
            if item["name"] in seen:
                raise doc.error(("model", section, i, "name"), f"duplicate {section} name {item['name']!r}")
            seen.add(item["name"])


def _check_attention(doc: Document, d: dict, i: int, attn: dict) -> None:
    path = ("model", "attention", i)
    if attn["num_heads"] % attn["num_kv_heads"]:
        raise doc.error(path + ("num_kv_heads",),
                        f"num_heads ({attn['num_heads']}) must be a multiple of num_kv_heads ({attn['num_kv_heads']})")
    if attn["kv_cache_group"] >= len(d["kv_cache"]["groups"]):
        raise doc.error(path + ("kv_cache_group",),
                        f"KV cache group {attn['kv_cache_group']} does not exist "
                        f"(kv_cache.groups has {len(d['kv_cache']['groups'])})")
    left, right = attn["sliding_window"]
    if left == 0 or right not in (-1, 0):
        raise doc.error(path + ("sliding_window",),
                        f"sliding_window must be [-1, -1] or [left >= 1, 0 or -1], got {[left, right]}")
