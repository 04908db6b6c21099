#!/usr/bin/env python3
"""Does vLLM run on this GPU machine? Stock vLLM, dummy weights, token ids in and out.

    source bench/vllm_gpu_setup.sh env && python3 bench/vllm_smoke.py --config tests/fixtures/hf/X.json

Builds an offline ``vllm.LLM`` from a config.json the repo ships (no weights, no tokenizer:
``load_format="dummy"``, ``skip_tokenizer_init=True``), on the Triton attention backend, runs a
few requests and prints the time to ready and per request. The first step of issue 17's proof.
Not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time


def model_dir(config: str) -> str:
    """A directory holding only config.json: what vLLM needs for dummy weights."""
    path = tempfile.mkdtemp(prefix="vllm-model-")
    shutil.copy(config, os.path.join(path, "config.json"))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--enforce-eager", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ATTENTION_BACKEND", "TRITON_ATTN")
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    t_import = time.perf_counter() - t0
    llm = LLM(model=model_dir(args.config), load_format="dummy", skip_tokenizer_init=True,
              max_model_len=args.max_model_len, gpu_memory_utilization=0.85,
              enforce_eager=args.enforce_eager)
    t_ready = time.perf_counter() - t0
    params = SamplingParams(max_tokens=16, detokenize=False, ignore_eos=True)
    walls = []
    for n in (7, 300, 1500):
        t = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=list(range(100, 100 + n)))], params)
        walls.append(round(time.perf_counter() - t, 3))
        assert len(out[0].outputs[0].token_ids) == 16
    print(json.dumps({"import_s": round(t_import, 1), "ready_s": round(t_ready, 1), "request_walls_s": walls}))


if __name__ == "__main__":
    main()
