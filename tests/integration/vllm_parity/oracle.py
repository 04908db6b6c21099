"""What an installed vLLM release computes for each engine, by calling its own functions.

Run by tests/integration/vllm_parity/test_parity.py in a subprocess whose sys.path holds one vLLM release
(`python oracle.py < engines.json > facts.json`); each engine is the planner's engine config
with its expression names. vLLM's functions are called with stand-ins for the objects they
read (a config, a model runner that records what warmup_kernels hands it, a weight of the right
shape on the meta device): facts carry over, code does not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from tests.integration.vllm_parity import choices  # noqa: E402
from vllm_bridge.cli import stand_in_vendored_deep_gemm  # noqa: E402
from vllm_bridge.engine.standins import Device, install  # noqa: E402


def main() -> None:
    engines = json.load(sys.stdin)
    first = engines[0]["names"]
    install(Device(name="NVIDIA H100 80GB HBM3", capability=divmod(first["device_capability"], 10),
                   total_memory=80 << 30, num_sms=first["num_sms"]))
    stand_in_vendored_deep_gemm()
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        facts = [engine_facts(e) for e in engines]
    json.dump({"version": version(), "engines": facts}, sys.stdout)


def version() -> str:
    import vllm
    return vllm.__version__


def engine_facts(engine: dict) -> dict:
    set_capability(engine["names"]["device_capability"])
    runner = choices.model_runner(engine)
    kernels = choices.linear_kernels(engine, flashinfer=True)
    out = {"model_runner": runner, "capture": capture_sizes(engine, runner),
           # Worker.compile_or_warm_up_model calls warmup_kernels only `if self.use_v2_model_runner`
           "warmup_kernels": warmup_kernels(engine) if runner == "v2" else [],
           "linear_kernels": kernels, "linear_kernels_without_flashinfer": choices.linear_kernels(engine, False),
           "flashinfer": choices.flashinfer_installed(),
           "deep_gemm": deep_gemm(engine, choices.warmed_linears(engine, kernels)),
           "deep_gemm_without_flashinfer": deep_gemm(engine, choices.warmed_linears(
               engine, choices.linear_kernels(engine, False))),
           "moe_backends": moe_backends(engine), "flashinfer_cache": choices.flashinfer_cache(engine)}
    out["flashinfer_tokens"] = flashinfer_tokens(engine)
    out["lookahead"] = lookahead(engine)
    out["sampler"] = choices.sampler(engine)
    return out


def set_capability(capability: int) -> None:
    import vllm.platforms as platforms
    from vllm.platforms.interface import DeviceCapability
    cls = type(platforms._current_platform)
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*divmod(capability, 10)))


# --- CUDA-graph sizes: VllmConfig._set_cudagraph_sizes, CudaGraphManager._init_candidates -----------

def capture_sizes(engine: dict, runner: str) -> dict:
    from vllm.config import CompilationConfig, VllmConfig
    from vllm.config.compilation import CUDAGraphMode
    data, names = engine["data"], engine["names"]
    comp = data["compilation"]
    given = {key: comp[key] for key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size")
             if comp[key] is not None}  # None: vLLM's default, as when the user sets nothing
    cc = CompilationConfig(cudagraph_mode=CUDAGraphMode[comp["cudagraph_mode"]], **given)
    spec = NS(uses_dynamic_speculative_decoding=lambda: False) if names["num_speculative_tokens"] else None
    config = NS(model_config=NS(enforce_eager=comp["enforce_eager"]), compilation_config=cc,
                scheduler_config=NS(max_num_seqs=names["max_num_seqs"],
                                    max_num_batched_tokens=names["max_num_batched_tokens"]),
                speculative_config=spec, uniform_decode_query_len=names["decode_query_len"],
                num_speculative_tokens=names["num_speculative_tokens"],
                performance_mode=comp["performance_mode"],
                parallel_config=NS(tensor_parallel_size=names["tensor_parallel_size"]))
    VllmConfig._set_cudagraph_sizes(config)
    if runner == "v1":
        return choices.v1_capture(engine, config, cc)
    sizes = list(cc.cudagraph_capture_sizes or [])
    return {"sizes": sizes, "decode": decode_descriptors(config, cc, names)}


def decode_descriptors(config, cc, names: dict) -> list[int]:
    from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
    if not cc.cudagraph_capture_sizes:
        return []
    manager = NS(compilation_config=cc, cudagraph_mode=cc.cudagraph_mode, max_num_reqs=names["max_num_seqs"],
                 decode_query_len=names["decode_query_len"], vllm_config=NS(
                     speculative_config=config.speculative_config, cache_config=NS(use_kda_recoverssm=False),
                     num_speculative_tokens=names["num_speculative_tokens"]),
                 varlen_decode=False, lora_capture_cases=[0], _maybe_ubatch_twin=lambda desc: None,
                 _candidates={}, _capture_descs={})
    CudaGraphManager._init_candidates(manager)
    decode_mode = cc.cudagraph_mode.decode_mode()
    if not cc.cudagraph_mode.separate_routine():
        return []
    return sorted({d.num_tokens for d in manager._capture_descs.get(decode_mode, [])
                   if d.uniform_token_count is not None})


# --- warmup_kernels through a recording model runner ---------------------------------------------

def warmup_kernels(engine: dict) -> list[dict]:
    import torch
    from vllm.v1.worker.gpu import warmup
    names = engine["names"]
    if names["is_pooling_model"]:
        return None  # pooling needs the model's pooler tasks; compared on generate models
    runner, steps = recording_runner(engine)
    torch.accelerator.synchronize = lambda *a, **k: None  # no device to wait for
    warmup.warmup_kernels(runner, lambda out: steps.append(scheduled(out)),
                          lambda grammar: steps.append(sampled(grammar)))
    return steps


def recording_runner(engine: dict):
    names, data = engine["names"], engine["data"]
    groups = [NS(kv_cache_spec=NS(block_size=g["block_size"])) for g in data["kv_cache"]["groups"]]
    k = names["num_speculative_tokens"]
    runner = NS(
        adaptive_verification=None, rejection_sampler=None,
        speculative_config=NS(method=names["speculative_method"]) if k else None,
        vllm_config=NS(is_mm_encoder_only=False, num_lookahead_tokens=names["num_lookahead_tokens"]),
        num_speculative_steps=k, decode_query_len=names["decode_query_len"], is_pooling_model=False,
        kv_cache_config=NS(kv_cache_groups=groups, num_blocks=names["num_blocks"]),
        max_model_len=names["max_model_len"], model_state=NS(max_encoder_len=0), is_encoder_decoder=False,
        scheduler_config=NS(max_num_seqs=names["max_num_seqs"],
                            max_num_batched_tokens=names["max_num_batched_tokens"]),
        block_tables=None, model_config=NS(get_vocab_size=lambda: names["vocab_size"]),
        kv_block_zeroer=None, kv_connector=NS(set_disabled=lambda flag: None), is_last_pp_rank=True)
    return runner, []


def scheduled(out) -> dict:
    if out.finished_req_ids:
        return {"kind": "cleanup", "finished": sorted(out.finished_req_ids)}
    if out.scheduled_new_reqs:
        return {"kind": "prefill", "temperature": out.scheduled_new_reqs[0].sampling_params.temperature,
                "requests": [[r.req_id, out.num_scheduled_tokens[r.req_id], [list(b) for b in r.block_ids]]
                             for r in out.scheduled_new_reqs]}
    c = out.scheduled_cached_reqs
    spec = out.scheduled_spec_decode_tokens or {}
    return {"kind": "decode", "requests": [
        [rid, c.num_computed_tokens[i], out.num_scheduled_tokens[rid], len(spec.get(rid, [])),
         None if c.new_block_ids[i] is None else [list(b) for b in c.new_block_ids[i]]]
        for i, rid in enumerate(c.req_ids)]}


def sampled(grammar) -> dict:
    if grammar is None:
        return {"kind": "sample", "bitmask": None}
    rows, width = grammar.grammar_bitmask.shape
    return {"kind": "sample", "bitmask": [int(rows), int(width)]}


# --- DeepGEMM: linear selection and M-values; FP8 MoE backend priority ------------------------------

def deep_gemm(engine: dict, warmed: list[str]) -> dict:
    """{'NxK': M-values} of the linears the release's DeepGEMM warmup takes (choices.warmed_linears:
    the kernel vLLM selected, then the warmup's own test of the layer)."""
    import torch
    from vllm.model_executor.warmup import deep_gemm_warmup as dgw
    names = engine["names"]
    dgw.num_compute_units = lambda index=None: names["num_sms"]
    shapes = {}
    for layer in engine["data"]["model"]["linear"]:
        if layer["name"] in warmed:
            shapes[f"{layer['n']}x{layer['k']}"] = dgw._generate_optimal_warmup_m_values(
                names["max_num_batched_tokens"], layer["n"], torch.device("meta"))
    return shapes


def moe_backends(engine: dict) -> list[str] | None:
    """The FP8 MoE oracle's priority list for block-FP8 MoE, first five backends."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as oracle
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8Dynamic128Sym, kFp8Static128BlockSym)
    names = engine["names"]
    ep = names["tensor_parallel_size"] * names["data_parallel_size"] \
        if engine["data"]["parallel"]["enable_expert_parallel"] else 1
    config = NS(moe_parallel_config=NS(ep_size=ep, use_deepep_v2_kernels=False))
    order = oracle._get_priority_backends(config, kFp8Static128BlockSym, kFp8Dynamic128Sym)
    return [b.name for b in order[:5]]


def flashinfer_tokens(engine: dict) -> list[int] | None:
    from vllm.model_executor.warmup import kernel_warmup
    counts = getattr(kernel_warmup, "_flashinfer_autotune_token_counts", None)
    if counts is None:
        return None  # vLLM 0.25 tunes inside flashinfer_autotune at max_num_batched_tokens
    names = engine["names"]
    runner = NS(scheduler_config=NS(max_num_batched_tokens=names["max_num_batched_tokens"]),
                get_model=lambda: NS(modules=lambda: []))
    return list(counts(runner))


def lookahead(engine: dict) -> int | None:
    from vllm.config import VllmConfig
    prop = getattr(VllmConfig, "num_lookahead_tokens", None)
    names = engine["names"]
    if not isinstance(prop, property) or names["speculative_method"] in ("ngram", "suffix"):
        return None  # ngram and suffix need a full SpeculativeConfig; 0.25 reserves no lookahead
    from vllm.config.speculative import SpeculativeConfig
    k, method = names["num_speculative_tokens"], names["speculative_method"]
    bare = NS(method=method, draft_model_config=NS(hf_config=NS()))
    spec = None if not k else NS(**{f: (lambda f=f: getattr(SpeculativeConfig, f)(bare)) for f in (
        "use_dspark", "use_dflash", "use_eagle", "uses_draft_model")}, draft_model_config=bare.draft_model_config)
    return prop.fget(NS(speculative_config=spec, num_speculative_tokens=k))


if __name__ == "__main__":
    main()
