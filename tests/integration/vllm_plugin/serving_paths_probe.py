"""serving_paths' steps as one installed vLLM release receives them, on CPU:
`python serving_paths_probe.py PLAN ENGINE > facts.json`.

Run by tests/integration/vllm_plugin/test_serving_paths_vllm.py in a subprocess whose sys.path holds the
release. VllmWorkerRunner builds each execute step's SchedulerOutput with vLLM's classes; vLLM's
own code then says what it makes of it: SamplingParams.sampling_type (greedy, random, seeded),
split_decodes_and_prefills (vllm/v1/attention/backends/utils.py) at the largest
reorder_batch_threshold its attention backends declare (read from their source: FlashAttention
MLA's builder does not import without its CUDA extension), and the context each prefill carries
(MLACommonMetadataBuilder.build: seq_len - query_len). Nothing runs a kernel.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def declared_thresholds() -> dict:
    """{builder class: its class-level reorder_batch_threshold} over vLLM's attention backends."""
    root = importlib.util.find_spec("vllm").submodule_search_locations[0]
    backends = os.path.join(root, "v1", "attention", "backends")
    folders = [backends, os.path.join(backends, "mla")]
    files = [os.path.join(f, n) for f in folders for n in sorted(os.listdir(f)) if n.endswith(".py")]
    files.append(os.path.join(root, "model_executor", "layers", "attention", "mla_attention.py"))
    out = {}
    for path in files:
        with open(path) as f:
            tree = ast.parse(f.read())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                if (isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == "reorder_batch_threshold"
                        and isinstance(item.value, ast.Constant) and isinstance(item.value.value, int)):
                    out[cls.name] = item.value.value
    return out


def split(out, threshold: int) -> dict:
    """vLLM's decode/prefill split of the step, requests in Model Runner V2's order (prepare_inputs
    sorts them by scheduled tokens, decodes first), and the context of each request."""
    import torch
    from vllm.v1.attention.backends.utils import split_decodes_and_prefills

    req_ids = sorted(out.num_scheduled_tokens, key=out.num_scheduled_tokens.get)
    query_lens = [out.num_scheduled_tokens[r] for r in req_ids]
    starts = torch.tensor([0] + [sum(query_lens[:i + 1]) for i in range(len(query_lens))], dtype=torch.int32)
    meta = NS(max_query_len=max(query_lens), num_reqs=len(req_ids), num_actual_tokens=sum(query_lens),
              query_start_loc_cpu=starts)
    num_decodes, num_prefills, _, _ = split_decodes_and_prefills(meta, decode_threshold=threshold)
    computed = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
    c = out.scheduled_cached_reqs
    computed.update(zip(c.req_ids, c.num_computed_tokens))
    prefills = req_ids[num_decodes:]
    return {"num_decodes": num_decodes, "num_prefills": num_prefills,
            "prefills_with_context": [r for r in prefills if computed[r] > 0]}


def describe(step, out, threshold: int) -> dict:
    new = [{"class": type(r).__name__, "req_id": r.req_id, "prefill_len": len(r.prefill_token_ids),
            "prompt_len": len(r.prompt_token_ids), "num_computed_tokens": r.num_computed_tokens,
            "block_ids": [list(b) for b in r.block_ids], "n": r.sampling_params.n,
            "sampling_type": r.sampling_params.sampling_type.name, "seed": r.sampling_params.seed,
            "logprobs": r.sampling_params.logprobs, "prompt_logprobs": r.sampling_params.prompt_logprobs}
           for r in out.scheduled_new_reqs]
    c = out.scheduled_cached_reqs
    cached = [{"req_id": r, "num_computed_tokens": n, "num_output_tokens": o,
               "all_token_ids": len(c.all_token_ids[r]) if r in c.all_token_ids else None}
              for r, n, o in zip(c.req_ids, c.num_computed_tokens, c.num_output_tokens)]
    fact = {"id": step.id, "class": f"{type(out).__module__}.{type(out).__name__}", "new": new, "cached": cached,
            "num_scheduled_tokens": dict(out.num_scheduled_tokens), "finished": sorted(out.finished_req_ids),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()}}
    if out.num_scheduled_tokens:
        fact["split"] = split(out, threshold)
    return fact


def main() -> None:
    from planner.api import expand, load_engine, load_plan
    from vllm_bridge.warmup.runner import VllmWorkerRunner

    plan_name, engine_name = sys.argv[1:3]
    steps = [s for s in expand(load_plan(plan_name), load_engine(engine_name)).steps if s.stage == "serving_paths"]
    worker = NS(model_runner=NS(), vllm_config=NS(speculative_config=None))
    runner = VllmWorkerRunner(worker, steps)
    thresholds = declared_thresholds()
    threshold = max(thresholds.values())
    facts = [describe(s, runner.scheduler_output(s), threshold) for s in steps if s.runner_method == "execute_model"]
    # Model Runner V2's scheduler sends no all_token_ids (Scheduler._make_cached_request_data)
    v2 = VllmWorkerRunner(NS(model_runner=NS(), vllm_config=NS(speculative_config=None, use_v2_model_runner=True)),
                          steps)
    v2_sent = sum(len(v2.scheduler_output(s).scheduled_cached_reqs.all_token_ids) for s in steps
                  if s.runner_method == "execute_model")
    json.dump({"thresholds": thresholds, "steps": facts, "v2_all_token_ids": v2_sent}, sys.stdout)


if __name__ == "__main__":
    main()
