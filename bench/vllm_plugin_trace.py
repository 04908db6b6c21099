#!/usr/bin/env python3
"""One run of the vLLM start-up proof: stock vLLM or vLLM + this project's plugin, one process.

    python3 bench/vllm_plugin_trace.py --config tests/fixtures/hf/X.json --arm stock|plugin \\
        --model-dir /tmp/warmup-proof/models/X --out RUN_DIR

Needs vLLM 0.25.0 on the path (bench/vllm_gpu_setup.sh: install, then `source ... env`), this
repository first on PYTHONPATH (the JIT monitor, and the plugin's code), a CUDA GPU. Normally run by
bench/vllm_startup_proof.sh, which sets each arm's cache directories and WARMUP_* variables.
Without a GPU only `--help` runs (and, here, the whole script against a stand-in vllm package, to
check the harness itself). Its GPU runs: bench/RESULTS.md, from part S.

result.json (written once at ready, again at the end, and on failure or SIGTERM with "error"):
ready_s (process start to LLM() built; process_start from /proc), llm_init_s, kv_cache
(num_gpu_blocks: vLLM's cache_config after EngineCore._initialize_kv_caches, block_size, tokens,
bytes), plugin_active, first_request_s, batches (per batch: wall, compiles), engine_steps (count,
max/p50/p99 and the five longest: the longest stall), compiles_after_ready (triton, deep_gemm,
torch_compile, flashinfer, events), monitor (the JIT monitor's summary), phases, plugin (the
report's status, precompile summary, worker lanes), wrapped / not_found, versions.

What it does: an offline ``vllm.LLM`` on dummy weights (``load_format="dummy"``,
``skip_tokenizer_init``) from a model directory holding only config.json (``--model-dir``: a fixed
path, reused: vLLM's torch.compile cache key includes it, so a warm run must see the same path;
config.json is copied there only if missing), with VLLM_ENABLE_V1_MULTIPROCESSING=0 so the engine
core and its worker run in this process. This project's JIT monitor (executor.jit_monitor.Monitor)
is installed and sealed right after the engine is ready, for both arms alike; then one request
alone (the first request's latency) and 499 more in --batches batches, of mixed prompt lengths
(1-4000 tokens) and sampling settings (greedy, top-p, top-k, min-p, penalties, logprobs), the same
for both arms (seeded). Every engine step is timed (the longest one is the worst stall a request
saw), and the monitor's after-seal counts are the compiles after ready, by kind.

The stock arm is stock vLLM: WARMUP_PLAN is removed, so the installed plugin is inert (vLLM loads
its entry point, which patches nothing). VLLM_PLUGINS is left alone: every VLLM_* variable not on
vLLM's ignore list feeds its torch.compile cache key, and the two arms must key theirs alike. The
plugin arm loads it through its ``vllm.general_plugins`` entry point (WARMUP_PLAN set by the
caller); ``plugin_active`` in the result says whether it patched vLLM's Worker.

Phase timeline (both arms; absolute time.time() stamps in result.json "phases"): before the LLM is
built, transparent wrappers (functools.wraps, *args/**kwargs) go around vLLM 0.25.0's Worker methods
(init_device, load_model, determine_available_memory, initialize_from_config,
compile_or_warm_up_model), the model runner's profile_run and capture_model (Model Runner V2's class
vllm/v1/worker/gpu/model_runner.py, which gpu_worker imports; V1's gpu_model_runner class when it is
imported, and the class of the worker's runner at load_model), kernel_warmup and warmup_kernels as
gpu_worker imported them, deep_gemm_warmup and flashinfer_autotune in kernel_warmup's module, and
torch.compile through Dynamo's compile start/end callbacks. The plugin patches the same Worker
methods when vLLM loads it (inside LLM()), after these wrappers: it keeps them as its originals, so
both run. For the plugin arm also its WorkerWarmup methods (prepare, start, the pool's start, the
pool's barrier finish_precompile or its device lane's finish_device_lane, run_plan: whichever exist; "not_found" lists the others), and,
from its report (WARMUP_PLAN_REPORT), each precompile worker's jobs (plugin.lanes: absolute times
from the pool's "created" stamp, or approximately its start) and the plan's stages laid end to end
from run_plan's start ("derived": true: walls from the report).
bench/plot_startup_timeline.py draws them.

`vllm bench startup` (vllm/benchmarks/startup.py in 0.25.0) is not used: its cold runs use a
temporary VLLM_CACHE_ROOT that is deleted afterwards (with Inductor's fresh_cache), so its warm
figure needs an unmeasured warm-up start that is itself cold for vLLM's caches: two cold stock
starts and a warm one in one command, more than one device call holds; Triton's cache is not
separated per arm, and it times LLM.from_engine_args, not the process from its start.

Over 400 lines: a GPU driver carried to the device alone: the engine's start, the trace, the JIT counts and
the result file in one script.
"""

from __future__ import annotations

import time

SCRIPT_START = time.time()

import argparse  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

PHASES: list[dict] = []
WRAPPED: list[str] = []
NOT_FOUND: list[str] = []
RESULT: dict = {}
CACHES: dict = {}  # the arm's cache listings at process start and at ready (cache_files)
PLUGIN_DIST = "warmup_planner"  # this project's entry point name in vllm.general_plugins


# --- time ------------------------------------------------------------------------------------------

def process_start_time() -> float | None:
    """When this process started (absolute), so that the interpreter's own start counts: its start
    in clock ticks after boot (/proc/self/stat) against the uptime now (/proc/uptime), both to
    1/100 s (/proc/stat's boot time is whole seconds: not used)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        now = time.time()
        return now - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except Exception:  # noqa: BLE001 - not Linux: the script's start stands in
        return None


def phase(name: str, start: float, end: float, **extra) -> None:
    PHASES.append({"name": name, "start": round(start, 4), "end": round(end, 4), **extra})


# --- transparent wrappers ----------------------------------------------------------------------------

def wrap(owner, attr: str, label: str) -> bool:
    """owner.attr runs as before, and appends a phase `label` (its entry and exit times).

    Plain functions and methods are wrapped with functools.wraps and *args/**kwargs; classmethods
    and staticmethods keep their kind. Wrapping twice is a no-op. False when owner has no attr."""
    where = (owner.__name__ if inspect.ismodule(owner) else f"{owner.__module__}.{owner.__qualname__}") + "." + attr
    try:
        raw = inspect.getattr_static(owner, attr)
    except AttributeError:
        NOT_FOUND.append(where)
        return False
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    func = raw.__func__ if kind else raw
    if getattr(func, "_proof_phase", None) is not None:
        return True
    if not callable(func):
        NOT_FOUND.append(where + " (not callable)")
        return False

    @functools.wraps(func)
    def timed(*args, **kwargs):
        start = time.time()
        try:
            return func(*args, **kwargs)
        finally:
            phase(label, start, time.time())

    timed._proof_phase = label
    setattr(owner, attr, kind(timed) if kind else timed)
    WRAPPED.append(where)
    return True


RUNNER_METHODS = (("profile_run", "profile run"), ("capture_model", "CUDA graphs"))


def wrap_runner_class(cls) -> None:
    for attr, label in RUNNER_METHODS:
        wrap(cls, attr, label)


def install_phase_wrappers(arm: str) -> None:
    """Everything wrapped before the LLM is built (and so before vLLM loads the plugin)."""
    t = time.time()
    import vllm.v1.worker.gpu_worker as gpu_worker  # imports Model Runner V2's module too

    phase("import vLLM worker", t, time.time())
    worker = gpu_worker.Worker
    # vLLM loads plugins inside LLM() (EngineArgs, EngineCore, the worker): not yet, so the plugin's
    # patches will go around these wrappers. Recorded in case a release loads them earlier.
    RESULT["plugin_patched_before_wrappers"] = "_warmup_planner_originals" in vars(worker)
    for attr, label in (("init_device", "init device"), ("load_model", "weights"),
                        ("determine_available_memory", "memory profile"),
                        ("initialize_from_config", "KV cache allocation"),
                        ("compile_or_warm_up_model", "compile_or_warm_up_model")):
        wrap(worker, attr, label)
    # The worker's own model runner class, whatever it is, once it exists (before the weights).
    load = worker.load_model

    @functools.wraps(load)
    def load_model(self, *args, **kwargs):
        runner = getattr(self, "model_runner", None)
        if runner is not None:
            wrap_runner_class(type(runner))
            RESULT["model_runner"] = f"{type(runner).__module__}.{type(runner).__qualname__}"
        return load(self, *args, **kwargs)

    load_model._proof_phase = "weights"
    worker.load_model = load_model
    for module in ("vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu_model_runner"):
        if module in sys.modules:  # V2's is imported by gpu_worker; V1's only when vLLM falls back to it
            wrap_runner_class(sys.modules[module].GPUModelRunner)
    # The module functions as gpu_worker calls them (it imported the names).
    wrap(gpu_worker, "kernel_warmup", "kernel_warmup")
    wrap(gpu_worker, "warmup_kernels", "synthetic batches")
    import vllm.model_executor.warmup.kernel_warmup as kw

    wrap(kw, "deep_gemm_warmup", "DeepGEMM warmup")
    wrap(kw, "flashinfer_autotune", "FlashInfer autotune")
    install_dynamo_callbacks()
    if arm == "plugin":
        try:
            from vllm_bridge.warmup.worker import WorkerWarmup
        except Exception as e:  # noqa: BLE001 - the plugin arm then shows plugin_active false
            NOT_FOUND.append(f"vllm_bridge.warmup.worker ({type(e).__name__}: {e})")
        else:
            # Whichever of these the plugin has (it changes; the result lists what was not found).
            for attr, label in (("prepare", "plugin prepare"), ("start", "plugin start"),
                                ("start_precompile", "precompile start"), ("_start_pool", "precompile start"),
                                ("finish_precompile", "precompile barrier"),
                                ("finish_device_lane", "precompile device lane"), ("run_plan", "plugin plan")):
                wrap(WorkerWarmup, attr, label)


def install_dynamo_callbacks() -> None:
    """torch.compile frames: Dynamo's start/end callbacks (outermost compile; any trigger)."""
    try:
        from torch._dynamo.callback import callback_handler
    except Exception as e:  # noqa: BLE001 - an older torch
        NOT_FOUND.append(f"torch._dynamo.callback ({type(e).__name__})")
        return
    open_starts: list[float] = []

    def trigger_of(args) -> str:
        trigger = getattr(args[0], "callback_trigger", None) if args else None
        return getattr(trigger, "name", str(trigger)) if trigger is not None else "DYNAMO"

    def on_start(*args, **kwargs):
        open_starts.append(time.time())

    def on_end(*args, **kwargs):
        if open_starts:
            trigger = trigger_of(args)
            name = "torch.compile" if trigger == "DYNAMO" else f"torch.compile ({trigger})"
            cid = getattr(args[0], "compile_id", None) if args else None
            phase(name, open_starts.pop(), time.time(), **({"compile_id": str(cid)} if cid is not None else {}))

    callback_handler.register_start_callback(on_start)
    callback_handler.register_end_callback(on_end)
    WRAPPED.append("torch._dynamo.callback.callback_handler (start/end)")


# --- the model, the requests -------------------------------------------------------------------------

def model_dir(config: str, path: str | None) -> str:
    """A directory holding config.json (all vLLM needs for dummy weights); reused when it has one."""
    if path is None:
        import tempfile

        path = tempfile.mkdtemp(prefix="vllm-model-")
    os.makedirs(path, exist_ok=True)
    target = os.path.join(path, "config.json")
    if not os.path.exists(target):
        shutil.copy(config, target)
    return path


def requests(n: int, seed: int = 0):
    """Mixed prompt lengths (1..4000 tokens) and sampling settings (greedy, top-k/p, min-p,
    penalties, logprobs); the same list for a given seed."""
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


# --- what the engine says after ready ------------------------------------------------------------

def first_attr(obj, *paths):
    """The first dotted attribute path of obj that exists and is not None: (value, path)."""
    for path in paths:
        value = obj
        try:
            for name in path.split("."):
                value = getattr(value, name)
        except AttributeError:
            continue
        if value is not None:
            return value, path
    return None, None


def kv_cache(llm) -> dict:
    """The KV cache vLLM allocated. vLLM 0.25.0: EngineCore._initialize_kv_caches sets
    vllm_config.cache_config.num_gpu_blocks (v1/engine/core.py); in-process, the LLMEngine's
    vllm_config is that same object, and InprocClient holds the EngineCore as .engine_core."""
    engine = llm.llm_engine
    blocks, where = first_attr(engine, "vllm_config.cache_config.num_gpu_blocks",
                               "engine_core.engine_core.vllm_config.cache_config.num_gpu_blocks",
                               "cache_config.num_gpu_blocks")
    config, _ = first_attr(engine, "vllm_config.cache_config", "engine_core.engine_core.vllm_config.cache_config")
    core, _ = first_attr(engine, "engine_core.engine_core")
    out = {"num_gpu_blocks": blocks, "source": f"llm.llm_engine.{where}" if where else None,
           "block_size": getattr(config, "block_size", None),
           "kv_cache_size_tokens": getattr(config, "kv_cache_size_tokens", None),
           "max_concurrency": getattr(config, "kv_cache_max_concurrency", None),
           "available_bytes": getattr(core, "available_gpu_memory_for_kv_cache", None)}
    return out


def plugin_active() -> bool:
    """Whether vLLM loaded the plugin and it patched the Worker (the stock arm never imports it)."""
    plugin = sys.modules.get("vllm_bridge.plugin")
    worker = getattr(sys.modules.get("vllm.v1.worker.gpu_worker"), "Worker", None)
    if plugin is None or worker is None:
        return False
    return getattr(plugin, "PATCHED", "_warmup_planner_originals") in vars(worker)


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("vllm", "torch", "triton", "flashinfer"):
        try:
            out[name] = getattr(__import__(name), "__version__", "?")
        except Exception:  # noqa: BLE001
            out[name] = None
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name(0)
        free, total = torch.cuda.mem_get_info()
        out["gpu_mem_free_after_ready_gib"] = round(free / 2**30, 2)
        out["gpu_mem_total_gib"] = round(total / 2**30, 2)
    except Exception:  # noqa: BLE001
        pass
    return out


def plugin_report(path: str | None, plan_phase: dict | None) -> dict:
    """From the plugin's report: its status, the precompile pool's worker lanes (absolute times:
    the pool's "created" plus each job's start_s/end_s), and the plan's stages laid end to end
    from run_plan's start (derived from the report's walls)."""
    if not path or not os.path.exists(path):
        return {"report": path, "found": False}
    with open(path) as f:
        report = json.load(f)
    out = {"report": path, "found": True, "status": report.get("status"), "wall_s": report.get("wall_s"),
           "counts": report.get("counts"), "host": report.get("host")}
    pre = report.get("precompile") or {}
    out["precompile"] = {k: pre.get(k) for k in ("status", "reason", "workers", "jobs", "wall_s", "busy_s",
                                                  "speedup", "spawned_s", "first_job_s", "compiled")}
    created, source = pre.get("created"), "report precompile.created"
    if created is None:
        starts = [p["start"] for p in PHASES if p["name"] == "precompile start"]
        created, source = (starts[0], "approx: the plugin's pool start entry") if starts else (None, None)
    lanes: dict = {}
    for record in pre.get("records") or []:
        if created is None or record.get("pid") is None or record.get("start_s") is None:
            continue
        lanes.setdefault(record["pid"], []).append({
            "start": round(created + record["start_s"], 4), "end": round(created + (record.get("end_s") or record["start_s"]), 4),
            "backend": record.get("backend"), "key": record.get("key"), "step": record.get("step"),
            "status": record.get("status")})
    out["precompile_created"], out["precompile_created_source"] = created, source
    out["lanes"] = [{"pid": pid, "jobs": jobs} for pid, jobs in sorted(lanes.items())]
    if plan_phase is not None:
        t = plan_phase["start"]
        for stage in report.get("stages") or []:
            wall = stage.get("wall_s") or 0.0
            phase(f"plan: {stage.get('stage')}", t, t + wall, derived=True)
            t += wall
    return out


# --- what the ranks and the caches say (tensor parallelism: the ranks are other processes) ---------

# The arm's cache roots (bench/vllm_startup_proof.sh sets them) and what a new file under each is.
# FlashInfer's JIT modules (one .so each) and the DeepGEMM fork inside FlashInfer's SM 9.0 block-FP8
# GEMM (TensorRT-LLM's, one cubin per kernel where it writes them to disk) are families of their own.
CACHE_ROOTS = (("vllm", "VLLM_CACHE_ROOT"), ("triton", "TRITON_HOME"), ("inductor", "TORCHINDUCTOR_CACHE_DIR"),
               ("flashinfer", "FLASHINFER_WORKSPACE_BASE"), ("trtllm_dg", "TRTLLM_DG_CACHE_DIR"))
CACHE_FAMILIES = (("vllm/deep_gemm/", "deep_gemm"), ("vllm/torch_compile_cache/", "torch_compile"),
                  ("triton/", "triton"), ("inductor/triton/", "triton"), ("inductor/", "inductor"), ("vllm/", "vllm"),
                  ("flashinfer/", "flashinfer"), ("trtllm_dg/", "flashinfer_deep_gemm"))
KERNEL_FILE = ".cubin"  # a Triton or DeepGEMM kernel is one directory that holds its cubin


def cache_files() -> set:
    """Every file under the arm's cache roots, as 'root/relative/path' (the plugin's claims left out:
    they are bookkeeping, not compiled code)."""
    out = set()
    for name, var in CACHE_ROOTS:
        root = os.environ.get(var)
        if not root or not os.path.isdir(root):
            continue
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "warmup-claims"]
            rel = os.path.relpath(dirpath, root)
            out.update(os.path.normpath(os.path.join(name, rel, f)) for f in files)
    return out


def cache_family(path: str) -> str:
    return next((family for prefix, family in CACHE_FAMILIES if path.startswith(prefix)), "other")


def new_cache_entries(before: set, after: set) -> dict:
    """What the caches gained between two listings: kernels (directories with a new cubin) for
    Triton and DeepGEMM, files for torch.compile, Inductor and the rest. Counts compiles in every
    process of the engine, the tensor-parallel ranks and their precompile pools included."""
    new = sorted(after - before)
    kernels: dict = {}
    files: dict = {}
    for path in new:
        family = cache_family(path)
        files[family] = files.get(family, 0) + 1
        if path.endswith(KERNEL_FILE) or (family == "flashinfer" and path.endswith(".so")):
            kernels.setdefault(family, set()).add(os.path.dirname(path))
    return {"kernels": {f: len(d) for f, d in sorted(kernels.items())}, "files": dict(sorted(files.items())),
            "examples": new[:20]}


def rank_path(path: str | None, rank: int) -> str | None:
    """The plugin's per-rank file (vllm_bridge.settings.with_rank: rank 0 keeps the name)."""
    from vllm_bridge.settings import with_rank

    return with_rank(path, rank)


def rank_reports(ranks: int) -> list:
    """Each rank's plugin report, briefly: its pool, its share of the node's keys, its fallback."""
    out = []
    for rank in range(ranks):
        path = rank_path(os.environ.get("WARMUP_PLAN_REPORT"), rank)
        report = load_json(path) or {}
        pre, host = report.get("precompile") or {}, report.get("host") or {}
        claims = {k: v for k, v in (pre.get("claims") or {}).items() if not isinstance(v, (list, dict))}
        out.append({"rank": rank, "report": path, "found": bool(report), "status": report.get("status"),
                    "fallback": host.get("fallback"), "precompile_wait_s": host.get("precompile_wait_s"),
                    "jobs": pre.get("jobs"), "workers": pre.get("workers"), "compiled": pre.get("compiled"),
                    "failed": pre.get("failed"), "startup_compiles": startup_compiles(report),
                    "claims": claims, "phases": host.get("phases")})
    return out


def startup_compiles(report: dict) -> dict:
    """What one rank compiled from load_model to ready, by kind, as its plugin counted it: vLLM's
    phases, the plan's stages (in the rank's process) and its pool (kernels its workers compiled)."""
    host, out = report.get("host") or {}, {}
    for row in (host.get("phases") or []) + (host.get("stages") or []):
        for kind, n in (row.get("compiled") or {}).items():
            out[kind] = out.get(kind, 0) + (n or 0)
    out["pool"] = (report.get("precompile") or {}).get("compiled") or 0
    return out


def rank_events(ranks: int) -> list:
    """Compiles each rank's plugin monitor logged after its warmup was sealed, by backend."""
    out = []
    for rank in range(ranks):
        path = rank_path(os.environ.get("WARMUP_JIT_LOG"), rank)
        by_backend: dict = {}
        try:
            with open(path or "", encoding="utf-8") as f:
                for text in f:
                    backend = json.loads(text).get("backend", "?")
                    by_backend[backend] = by_backend.get(backend, 0) + 1
        except (OSError, ValueError):
            pass
        out.append({"rank": rank, "log": path, "events": sum(by_backend.values()), "by_backend": by_backend})
    return out


def load_json(path: str | None):
    try:
        with open(path or "") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# --- the run ---------------------------------------------------------------------------------------------

def write_result(out_dir: str) -> None:
    RESULT["phases"] = sorted(PHASES, key=lambda p: (p["start"], -p["end"]))
    RESULT["wrapped"], RESULT["not_found"] = WRAPPED, NOT_FOUND
    path = os.path.join(out_dir, "result.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULT, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def on_sigterm(signum, frame):  # `timeout` ends the run: what was measured is still written
    raise SystemExit(f"killed by signal {signum} (the run's time limit)")


def summary_counts(summary: dict) -> dict:
    after = summary.get("after_seal") or {}
    return {"triton": after.get("compiled"), "triton_jit_misses": after.get("jit_misses"),
            "triton_disk_loads": after.get("disk_loads"), "deep_gemm": after.get("deep_gemm_jit"),
            "torch_compile": after.get("dynamo_compiles"), "flashinfer": after.get("flashinfer_jit"),
            "events": len(summary.get("post_seal_events") or [])}


def run(args) -> None:
    llm, ready = start_engine(args)
    write_result(args.out)  # what start-up measured, before the trace (in case it fails or hangs)
    trace(llm, args, ready)
    RESULT["finished_at"] = time.time()


def start_engine(args):
    """The engine from process start to ready, timed phase by phase; returns (llm, ready time)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if args.arm == "stock":
        os.environ.pop("WARMUP_PLAN", None)
    started = process_start_time()
    RESULT.update(arm=args.arm, config=os.path.basename(args.config), argv=sys.argv,
                  script_start=SCRIPT_START, process_start=started or SCRIPT_START,
                  process_start_source="/proc/self/stat" if started else "script start",
                  env={k: os.environ.get(k) for k in (
                      "WARMUP_PLAN", "WARMUP_JOBS", "WARMUP_PLAN_REPORT", "WARMUP_JIT_LOG", "VLLM_PLUGINS",
                      "VLLM_CACHE_ROOT", "TRITON_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                      "DG_JIT_CACHE_DIR", "CUDA_CACHE_PATH", "VLLM_USE_FLASHINFER_SAMPLER",
                      "FLASHINFER_WORKSPACE_BASE", "TRTLLM_DG_CACHE_DIR",
                      "VLLM_ENABLE_V1_MULTIPROCESSING", "PYTHONPATH")})
    path = model_dir(args.config, args.model_dir)
    RESULT["model_dir"] = path
    t = time.time()
    from vllm import LLM

    phase("import vllm", t, time.time())
    install_phase_wrappers(args.arm)
    CACHES["start"] = cache_files()  # before the clock of LLM(): the listing is the harness's, not vLLM's
    t = time.time()
    llm = LLM(model=path, load_format="dummy", skip_tokenizer_init=True, max_model_len=args.max_model_len,
              gpu_memory_utilization=args.gpu_memory_utilization, seed=args.seed,
              tensor_parallel_size=args.tensor_parallel_size, enable_expert_parallel=args.enable_expert_parallel)
    ready = time.time()
    CACHES["ready"] = cache_files()
    RESULT["cache_new_to_ready"] = new_cache_entries(CACHES["start"], CACHES["ready"])
    RESULT["tensor_parallel_size"] = args.tensor_parallel_size
    RESULT["enable_expert_parallel"] = args.enable_expert_parallel
    phase("LLM() to ready", t, ready)
    RESULT.update(ready_at=ready, ready_s=round(ready - RESULT["process_start"], 3),
                  ready_s_from_script=round(ready - SCRIPT_START, 3), llm_init_s=round(ready - t, 3),
                  kv_cache=kv_cache(llm), plugin_active=plugin_active(), versions=versions())
    compilation, _ = first_attr(llm.llm_engine, "vllm_config.compilation_config")
    RESULT["vllm_compilation_time_s"] = getattr(compilation, "compilation_time", None)
    plans = [p for p in PHASES if p["name"] == "plugin plan"]
    RESULT["plugin"] = plugin_report(os.environ.get("WARMUP_PLAN_REPORT"), plans[0] if plans else None)
    if args.arm == "plugin":
        RESULT["ranks"] = rank_reports(args.tensor_parallel_size)
    return llm, ready


def trace(llm, args, ready: float) -> None:
    """The requests after ready, under a sealed JIT monitor: compiles by kind, walls, engine steps."""
    from executor.jit_monitor import Monitor

    monitor = Monitor("warn", os.path.join(args.out, "jit_after_ready.jsonl")).install()
    monitor.seal()
    RESULT["monitor_sealed_at"] = time.time()
    steps: list[dict] = []
    step = llm.llm_engine.step

    @functools.wraps(step)
    def timed_step(*a, **k):
        t0 = time.time()
        try:
            return step(*a, **k)
        finally:
            steps.append({"start": t0, "wall_s": time.time() - t0})

    llm.llm_engine.step = timed_step
    walls, trace_start, trace_end = run_batches(llm, monitor, args)
    summary = monitor.summary()
    RESULT.update(first_request_s=walls[0]["wall_s"], batches=walls, trace_s=round(trace_end - trace_start, 3),
                  engine_steps=step_stats(steps, ready), compiles_after_ready=summary_counts(summary),
                  monitor={**summary, "post_seal_events": summary.get("post_seal_events", [])[:50]})
    # The monitor above sees this process only; the caches and the ranks' own monitors see the rest.
    RESULT["cache_new_after_ready"] = new_cache_entries(CACHES["ready"], cache_files())
    if args.arm == "plugin":
        RESULT["rank_events_after_ready"] = rank_events(args.tensor_parallel_size)


def run_batches(llm, monitor, args):
    """The first request alone, then the rest in --batches batches; each batch's wall and compiles."""
    batch = requests(args.requests, args.seed)
    rest = batch[1:]
    size = -(-len(rest) // max(1, args.batches))
    groups = [batch[:1]] + [rest[i:i + size] for i in range(0, len(rest), size)]
    walls = []
    trace_start = time.time()
    for i, group in enumerate(groups):
        name = "first request" if i == 0 else f"batch {i}"
        events_before = len(monitor.post_seal_events)
        monitor.begin_step(name)
        t0 = time.time()
        outputs = llm.generate([p for p, _ in group], [s for _, s in group], use_tqdm=False)
        t1 = time.time()
        counts = monitor.end_step()  # DeepGEMM's cache is polled here
        phase(name, t0, t1)
        if i == 0:
            RESULT["first_request_done_at"] = t1
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        walls.append({"name": name, "requests": len(group), "wall_s": round(t1 - t0, 3), "generated_tokens": tokens,
                      "compiles": summary_counts({"after_seal": counts.as_dict() if counts else {},
                                                  "post_seal_events": monitor.post_seal_events[events_before:]})})
    trace_end = time.time()
    phase("trace", trace_start, trace_end)
    return walls, trace_start, trace_end


def step_stats(steps: list, ready: float) -> dict:
    """Engine-step walls: count, max, p50, p99 and the five longest (when after ready)."""
    if not steps:
        return {"count": 0, "max_s": None, "p50_s": None, "p99_s": None, "longest": []}
    walls = sorted(s["wall_s"] for s in steps)
    longest = sorted(steps, key=lambda s: -s["wall_s"])[:5]
    return {"count": len(steps), "max_s": round(walls[-1], 4), "p50_s": round(walls[len(walls) // 2], 4),
            "p99_s": round(walls[min(len(walls) - 1, int(len(walls) * 0.99))], 4),
            "longest": [{"at_s": round(s["start"] - ready, 3), "wall_s": round(s["wall_s"], 4)} for s in longest]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a Hugging Face config.json (tests/fixtures/hf/*.json)")
    parser.add_argument("--arm", choices=("stock", "plugin"), required=True)
    parser.add_argument("--out", required=True, help="the run's directory: result.json, jit_after_ready.jsonl")
    parser.add_argument("--model-dir", help="the model directory to reuse (config.json copied there if "
                        "missing); default: a new temporary one (then a warm run recompiles)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--batches", type=int, default=4, help="the requests after the first, in this many batches")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="vLLM's tensor_parallel_size: above 1 the ranks are worker processes, whose "
                        "compiles this process's monitor cannot see (the caches and the ranks' reports do)")
    parser.add_argument("--enable-expert-parallel", action="store_true",
                        help="vLLM's enable_expert_parallel: the experts sharded over the TP ranks (EP = TP)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        run(args)
    except BaseException as e:
        RESULT["error"] = f"{type(e).__name__}: {e}"
        RESULT["traceback"] = traceback.format_exc()[-4000:]
        RESULT["failed_at"] = time.time()
        write_result(args.out)
        raise
    write_result(args.out)
    brief = {k: RESULT.get(k) for k in ("arm", "ready_s", "first_request_s", "trace_s", "plugin_active")}
    brief["kv_blocks"] = (RESULT.get("kv_cache") or {}).get("num_gpu_blocks")
    brief["compiles_after_ready"] = RESULT.get("compiles_after_ready")
    brief["cache_kernels_after_ready"] = (RESULT.get("cache_new_after_ready") or {}).get("kernels")
    brief["max_step_s"] = (RESULT.get("engine_steps") or {}).get("max_s")
    print(json.dumps(brief))


if __name__ == "__main__":
    main()
