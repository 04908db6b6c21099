#!/usr/bin/env python3
"""One arm of issue 17's proof: stock vLLM or vLLM + the warmup-planner plugin (NOT YET RUN).

    python3 bench/vllm_plugin_trace.py --config tests/fixtures/hf/X.json --arm stock|plugin --out DIR

Offline vllm.LLM on dummy weights (load_format=dummy, skip_tokenizer_init, Triton attention), in
one process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that this project's JIT monitor, installed and
sealed right after the engine is ready, counts every compile of the trace by kind, for both arms
alike. Then 500 requests of mixed prompt lengths and sampling settings. Writes DIR/result.json:
time to ready, the first request's latency, trace wall, compiles after ready by kind; the plugin
arm's per-stage walls are in its WARMUP_PLAN_REPORT (set by bench/vllm_plugin_gpu.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time


def model_dir(config: str) -> str:
    path = tempfile.mkdtemp(prefix="vllm-model-")
    shutil.copy(config, os.path.join(path, "config.json"))
    return path


def requests(n: int, seed: int = 0):
    """Mixed prompt lengths (1..4000 tokens) and sampling settings (greedy, top-k/p, penalties, logprobs)."""
    from vllm import SamplingParams

    rng = random.Random(seed)
    kinds = [dict(temperature=0.0), dict(temperature=0.8, top_p=0.9), dict(temperature=1.0, top_k=50),
             dict(temperature=0.7, min_p=0.05, repetition_penalty=1.1), dict(temperature=0.9, logprobs=5),
             dict(temperature=0.6, presence_penalty=0.5, frequency_penalty=0.5)]
    out = []
    for _ in range(n):
        length = int(min(4000, max(1, rng.lognormvariate(5.5, 1.2))))
        params = SamplingParams(max_tokens=rng.randint(1, 64), ignore_eos=True, detokenize=False,
                                **rng.choice(kinds))
        out.append(({"prompt_token_ids": [rng.randrange(100, 30000) for _ in range(length)]}, params))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--arm", choices=("stock", "plugin"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ATTENTION_BACKEND", "TRITON_ATTN")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if args.arm == "stock":
        os.environ.pop("WARMUP_PLAN", None)
    t0 = time.perf_counter()
    from vllm import LLM

    llm = LLM(model=model_dir(args.config), load_format="dummy", skip_tokenizer_init=True,
              max_model_len=4096, gpu_memory_utilization=0.85)
    ready = time.perf_counter() - t0
    from executor.jit_monitor import Monitor

    monitor = Monitor("warn", os.path.join(args.out, "jit_after_ready.jsonl")).install()
    monitor.seal()
    batch = requests(args.requests)
    t = time.perf_counter()
    llm.generate([batch[0][0]], batch[0][1])
    first = time.perf_counter() - t
    t = time.perf_counter()
    llm.generate([p for p, _ in batch[1:]], [s for _, s in batch[1:]])
    trace = time.perf_counter() - t
    result = {"arm": args.arm, "config": os.path.basename(args.config), "ready_s": round(ready, 2),
              "first_request_s": round(first, 3), "trace_s": round(trace, 2), "monitor": monitor.summary()}
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
