"""The plugin's own cost on a warm start, per phase, on CPU (issue 46 item 2).

What each process of a warm start pays for the plugin, timed on its pure-Python parts (no vLLM,
no GPU: the live VllmConfig is stood in for by the model's config.json, as the API server's
build-ahead thread reads it, and the loaded model by stand-in modules with the engine's linears):

  import          `import vllm_bridge.plugin` in a fresh interpreter (every process, at register)
  derive          the engine config from config.json (hf.engine_from_hf + engine_from_document:
                  what engine_from_vllm_config and ahead.modules_ahead both do)
  expand          WARMUP_PLAN expanded for it (worker_plan.make_plan), against what a record of
                  the expanded plan would cost to use instead: its JSON read, parsed
                  (ExpandedPlan.from_dict, no schema validation) and checked fresh (check_fresh
                  re-reads the tables it consulted); and to write (to_dict + json.dumps)
  plugin_plan     the plan as the worker runs it
  live check      check_live_layers on stand-in modules: every shape listed (no re-plan), and
                  one shape missing (a re-plan: make_plan for the grown engine)
  pool decide     the precompile pool's decision on CPU (off: GPU backends), and the manifest's
                  fingerprint (sources hashed) that decides a skip on a GPU

    python bench/plugin_cost.py [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace as NS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CASES = (("llama-3.1-8b-instruct-fp8-block", "vllm-0.25"), ("llama-3.1-8b-instruct-fp8-block", "vllm-0.33"),
         ("qwen3-30b-a3b-fp8", "vllm-0.25"), ("qwen3-30b-a3b-fp8", "vllm-0.33"))

SHIPPED = ("llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100")


def ms(fn, repeat: int):
    """Median milliseconds of `fn()` over `repeat` calls, and its last value."""
    times, value = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2), value


def first_call_ms() -> dict:
    """A fresh interpreter's first derive + make_plan (lazy imports included: what one process pays once)."""
    code = ("import json,time,sys; sys.path.insert(0,'.'); t=time.perf_counter();"
            "from vllm_bridge.warmup.worker_plan import make_plan; from vllm_bridge.settings import Settings;"
            "from planner.api import load_engine; e=load_engine('llama-3.1-8b-fp8-h100'); t1=time.perf_counter();"
            "make_plan(Settings('vllm-0.33'), e); t2=time.perf_counter();"
            "print(json.dumps({'imports_and_engine_ms': round((t1-t)*1000,1), 'first_make_plan_ms': round((t2-t1)*1000,1)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout)


def import_ms() -> float:
    code = "import time; t=time.perf_counter(); import vllm_bridge.plugin; print((time.perf_counter()-t)*1000)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return round(float(out.stdout.strip()), 1)


def stand_in_model(engine, drop: int = 0):
    """Modules as vLLM's loaded model holds them: one per block-FP8 linear layer of the engine
    (its N, K and kernel); `drop` of its shapes grown by one (so the engine lacks them)."""
    kernel_cls = {}
    modules = []
    shapes = [l for l in engine.facts.model.linear if l.quant.method == "fp8" and l.quant.block is not None]
    for i, layer in enumerate(shapes):
        name = layer.kernel or "deep_gemm"
        cls = kernel_cls.setdefault(name, type(name, (), {}))
        n = layer.n + (128 if i < drop else 0)
        for _ in range(layer.count):
            modules.append(NS(quant_method=NS(fp8_linear=cls(), block_quant=True),
                              output_size_per_partition=n, input_size_per_partition=layer.k))
    return NS(modules=lambda: iter(modules))


def case(model: str, plan: str, repeat: int, record_root: str) -> dict:
    from planner.engine import hf
    from planner.engine.config import engine_from_document
    from planner.yamlio import Document
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker_plan import check_live_layers, make_plan, plugin_plan

    path = os.path.join(ROOT, "tests", "fixtures", "hf", f"{model}.json")

    def derive():
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        data = hf.engine_from_hf(config, hf.EngineRequest(max_model_len=8192, num_blocks=4096, ignore_memory=True,
                                                          gpu="H100", source=path))
        return engine_from_document(Document(data=data, file=f"<{path}>"))

    row = {"model": model, "plan": plan}
    row["derive_ms"], engine = ms(derive, repeat)
    off = Settings(plan)
    row["expand_ms"], expanded = ms(lambda: make_plan(off, engine), repeat)
    row.update(record_costs(plan, engine, expanded, repeat))
    row["plugin_plan_ms"], _ = ms(lambda: plugin_plan(expanded), repeat)
    row["steps"] = len(expanded.steps)
    model_ok = stand_in_model(engine)
    row["live_check_ms"], check = ms(lambda: check_live_layers(model_ok, off, engine, expanded), repeat)
    assert not check.why, check.why
    grown = stand_in_model(engine, drop=1)
    row["live_check_replan_ms"], check = ms(lambda: check_live_layers(grown, off, engine, expanded), repeat)
    row["replanned"] = check.expanded is not expanded
    return row


def record_costs(plan: str, engine, expanded, repeat: int) -> dict:
    """What using a record of `expanded` would cost instead of expanding: read + parse + freshness
    check (record_read_ms), and writing it on a cold start (record_write_ms); the record is exact."""
    from planner.api import check_fresh, load_target
    from planner.plan.expanded import ExpandedPlan

    source = load_target(plan).plan
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name

    def write():
        with open(path, "w", encoding="utf-8") as out:
            out.write(json.dumps(expanded.to_dict(), separators=(",", ":")))

    def read():
        with open(path, encoding="utf-8") as src:
            loaded = ExpandedPlan.from_dict(json.load(src))
        check_fresh(loaded, engine, source)
        return loaded
    try:
        out = {"record_write_ms": ms(write, repeat)[0]}
        out["record_read_ms"], loaded = ms(read, repeat)
        out["record_bytes"] = os.path.getsize(path)
    finally:
        os.unlink(path)
    assert loaded == expanded, "a record would not be the plan expand makes"
    return out


def shipped(name: str, plan: str, repeat: int, record_root: str) -> dict:
    """A shipped engine config (plans/engines): expand, against reading a record of its result."""
    from planner.api import load_engine
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker_plan import make_plan

    engine = load_engine(name)
    row = {"engine": name, "plan": plan}
    row["expand_ms"], expanded = ms(lambda: make_plan(Settings(plan), engine), repeat)
    row.update(record_costs(plan, engine, expanded, repeat))
    row["steps"] = len(expanded.steps)
    return row


def pool(repeat: int) -> dict:
    from executor.precompile import fingerprint  # the sources' digest included

    return {"fingerprint_ms": ms(fingerprint, repeat)[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        out = {"import_ms": import_ms(), "first_call": first_call_ms(), "pool": pool(args.repeat),
               "cases": [case(m, pl, args.repeat, root) for m, pl in CASES],
               "shipped": [shipped(e, pl, args.repeat, root) for e in SHIPPED for pl in ("vllm-0.25", "vllm-0.33")]}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
