"""The digests of a plan's inputs: made when a plan is expanded, checked when it is used.

An expanded plan carries the sha256 of exactly the inputs that shaped it, one per input
(``inputs``), and a digest of those (``digest``): the resolved plan's stages, the engine
config with defaults applied (name and description excluded), the planner version, the
tuned kernel tables its dispatch read (with their names, to read them again), and, for a
plan with DeepGEMM steps when it is known, the DeepGEMM install (``VERSION@INCLUDE_DIR``:
2.5 and 2.6 put the include path in every kernel's cache key). The planner imports no
DeepGEMM: ``warmup plan --deep-gemm`` states it, and ``warmup execute`` passes the one it
would run, so a plan saved for one DeepGEMM is stale under another. The
same functions make them (planner.plan.expand) and recompute them for a stale-plan check
(planner.api.check_fresh), so the two cannot disagree on what an input is.
"""

from __future__ import annotations

from .. import __version__
from ..hashing import digest
from ..tables import kernel_configs

INPUTS = ("plan", "engine", "planner", "kernel_configs", "vllm_moe_configs", "deep_gemm")


def input_digests(plan, engine, consulted: dict | None = None, deep_gemm: str | None = None,
                  moe_read: dict | None = None) -> dict:
    """The inputs of a plan expanded now. `consulted`: {table name: content or None} of the tuned
    tables the dispatch read (planner.tables.kernel_configs.TableReader.consulted); `deep_gemm`: the DeepGEMM
    install its DeepGEMM steps are for (``VERSION@INCLUDE_DIR``), recorded as it is; `moe_read`:
    {file name: digest or None} of vLLM's fused_moe tables read (planner.tables.vllm_moe)."""
    inputs = {"plan": digest(plan.shaping_fields()), "engine": digest(engine.shaping_fields()),
              "planner": __version__}
    if consulted:
        # Only plans whose dispatch read tables carry this input (and the names, to re-read them).
        inputs["kernel_configs"] = digest(consulted)
        inputs["kernel_config_tables"] = sorted(consulted)
    if moe_read:
        # Which of vLLM's tables shaped the fused_moe steps (null: none, vLLM's defaults).
        inputs["vllm_moe_configs"] = digest(moe_read)
        inputs["vllm_moe_config_tables"] = dict(moe_read)
    if deep_gemm:
        inputs["deep_gemm"] = deep_gemm
    return inputs


def current_inputs(recorded: dict, engine, plan=None, deep_gemm: str | None = None) -> dict:
    """The recorded inputs' values now, for the engine (and the plan, when given): what
    ``input_digests`` would record today. The plan and the DeepGEMM install are compared only
    when given."""
    now = {"engine": digest(engine.shaping_fields()), "planner": __version__}
    if plan is not None:
        now["plan"] = digest(plan.shaping_fields())
    if "kernel_configs" in recorded:
        now["kernel_configs"] = digest(kernel_configs.reread(recorded.get("kernel_config_tables", [])))
    if "vllm_moe_configs" in recorded:
        from ..tables import vllm_moe

        now["vllm_moe_configs"] = digest(vllm_moe.reread(recorded.get("vllm_moe_config_tables", {})))
    if "deep_gemm" in recorded and deep_gemm is not None:
        now["deep_gemm"] = deep_gemm
    return now


def changed_inputs(recorded: dict, engine, plan=None, deep_gemm: str | None = None) -> list[tuple[str, str, str]]:
    """(input, digest in the plan, digest now) for every input that changed."""
    now = current_inputs(recorded, engine, plan, deep_gemm)
    return [(key, recorded[key], now[key]) for key in INPUTS if key in now and recorded.get(key) != now[key]]
