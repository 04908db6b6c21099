"""`warmup execute --jobs N`: compile the plan's distinct variants in N worker processes first.

Threads do not help (the GIL serializes Triton's compiles); processes do. Each distinct
compile key of the plan (``compile_keys`` of its gemm, grouped_gemm and attention steps)
becomes one *job*: the first step and value that reach the key, run in a worker through
the backend's family method. For Triton that is its compile-only twin
(``TritonCompileOnly``, executor/backends/triton_compile.py): the same ``launch``
functions as the main process's calls, on stand-in tensors of the same dtypes, shapes
and alignment, compiled for the GPU's target without torch or a CUDA context, so the
worker builds exactly the variant the main process will launch (an exact step keeps its
per-value key check); DeepGEMM jobs run the library itself. Workers share the
on-disk caches with the main process (Triton's ``TRITON_CACHE_DIR``, DeepGEMM's
``DG_JIT_CACHE_DIR``); Triton writes every entry to a temporary directory and renames it
into place, so concurrent workers leave complete entries. The main process then runs
every planned step as before, and its launches are disk loads.

Orchestration (``Precompiler``), in the main process:

* the pool (``ProcessPoolExecutor``) is started before the main process imports torch or
  touches CUDA, so that worker start-up overlaps the main process's own; workers are
  forked from a fork server that imported Triton and the kernel sources once, not torch
  (executor/worker_preload.py; it never creates a CUDA context, so forking it is safe;
  torch only when DeepGEMM jobs need it). The GPU's compute capability comes from NVML
  (``gpu_capability``: no CUDA context), and the workers compile for it offline;
  importing torch took 4.0-4.9 s on an H100 host, Triton 0.2-0.3 s (2026-11-23). The
  processes are started, and the first jobs submitted, from a background thread:
  starting the first worker waits for the fork server's imports;
* a job is submitted once every ``autotune`` step before its step has run (a tuning
  step rewrites the tables that pick the GEMM variants, and its timings must not share
  the GPU with the workers); DeepGEMM jobs go first;
* before each step the main process waits for the jobs of that step's keys only, so
  compiling and loading overlap (the first step that has a job also waits for every
  DeepGEMM job: DeepGEMM is counted by kernels appearing in its cache directory, which
  would otherwise be charged to whatever step runs);
* a job that fails is reported with its error and the main process compiles that
  variant itself (the JIT monitor shows it); a crashed worker fails its jobs, not the run.

Steps without ``compile_keys`` (older plans), and steps whose keys do not pair one to one
with their values (``full`` and ``buckets`` modes list the distinct keys only), become one
job for the whole step, keyed by the step's content: still parallel across steps.

After a run a manifest (``warmup-precompiled.json`` in the Triton cache directory) lists
the keys known to be in the disk caches, with a fingerprint (triton, torch and DeepGEMM
versions, a hash of the kernel and dispatch sources, the GPU models, the TRITON_*/DG_*
settings). A later run whose keys are all listed starts no pool: a warm start costs only
the main process's disk loads. Wiping the cache removes the manifest with it; a manifest
that lies only makes the main process compile (correct, slower, and the monitor shows it).

Nothing here imports torch or triton in the main process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from planner.steps import Autotune, Keyed

from . import registry
from .jit_monitor import deep_gemm_cache_dir

PRECOMPILE_BACKENDS = ("triton", "deep_gemm")  # backends whose variants are compiled in workers by default
GPU_BACKENDS = ("triton", "deep_gemm")         # these compile only on a CUDA device
# A worker runs a backend's compile-only twin where it has one (no torch, no CUDA context).
WORKER_CLASSES = {"triton": ("executor.backends.triton_compile", "TritonCompileOnly")}
WORKER_ENV_PREFIXES = ("TRITON_", "DG_", "WARMUP_")  # settings a worker takes from the main process
MAX_DEFAULT_JOBS = 32
MANIFEST_NAME = "warmup-precompiled.json"
MANIFEST_FORMAT = "warmup-precompiled/v1"
EMPTY_CACHE_BYTES = 1 << 30  # a worker frees its cached GPU memory above this much
# Sources that decide which variant a call compiles: the kernels, the backends' allocation
# paths and the dispatch models. A change to any invalidates the manifest.
SOURCE_GLOBS = (("executor", "kernels"), ("executor", "kernels", "jit"), ("kernel_model",))
SOURCE_FILES = (("executor", "backends", "triton.py"), ("executor", "backends", "triton_compile.py"),
                ("executor", "backends", "deep_gemm.py"), ("executor", "runner", "kernels.py"))


def default_jobs() -> int:
    """The CPU cores this process may use, at most MAX_DEFAULT_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


# --- jobs ---------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One worker task: warm `keys` by running `values` of `step` through `backend`."""

    key: str                  # the job's own key (the first of `keys`)
    keys: list[str]           # the compile keys it warms (several for a whole-step job)
    backend: str
    kind: str
    step_id: str
    index: int                # the step's position in the plan
    step: object              # the step as the worker runs it (a variant's job: only its first value)
    values: list              # the values of the step's family method (step.call_values())
    whole_step: bool = False  # every value of a step that pairs no key with a value
    release: int = -1         # index of the last autotune step before it (-1: none)

    def payload(self) -> dict:
        return {"key": self.key, "keys": list(self.keys), "backend": self.backend, "kind": self.kind,
                "step_id": self.step_id, "step": self.step, "values": self.values,
                "whole_step": self.whole_step}


def step_content_key(step) -> str:
    """The key of a whole-step job: its content (not its id or stage), so stable across plans."""
    body = {k: v for k, v in step.to_dict().items() if k not in ("id", "stage")}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return f"step:{step.kind}:{digest}"


def step_keys(step) -> list[str]:
    """The compile keys a keyed step warms (its content key when it pairs none)."""
    return step.compile_keys or [step_content_key(step)]


def eligible(step, backend_of, backends) -> str | None:
    """The backend whose variants a step's keys name, when its jobs can run in workers."""
    if not isinstance(step, Keyed) or step.backend not in backends:
        return None
    if backend_of(step) != step.backend:
        return None  # --backend chose another implementation: the keys describe the planned one
    return step.backend


def compile_jobs(steps, backend_of=None, backends=PRECOMPILE_BACKENDS,
                 have: frozenset | set = frozenset()) -> list[Job]:
    """One job per distinct (backend, key) not in `have`, at the first step and value that reach it.

    `backend_of(step)` resolves --backend (default: what the step names); only steps run by
    their planned backend, one of `backends`, get jobs. Plan order."""
    backend_of = backend_of or (lambda step: step.backend)
    seen = set(have)
    jobs: list[Job] = []
    last_tune = -1
    for index, step in enumerate(steps):
        if isinstance(step, Autotune):
            last_tune = index
            continue
        backend = eligible(step, backend_of, backends)
        if backend is not None:
            jobs += _step_jobs(step, backend, seen, dict(backend=backend, kind=step.kind, step_id=step.id,
                                                         index=index, release=last_tune))
    return jobs


def _step_jobs(step, backend: str, seen: set, common: dict) -> list[Job]:
    """A job per variant not seen yet, at its first value; a whole-step job when the step
    pairs no key with a value (a kernel the dispatch models do not cover)."""
    if not step.variants:
        key = step_content_key(step)
        if (backend, key) in seen:
            return []
        seen.add((backend, key))
        return [Job(key=key, keys=[key], step=step, values=step.call_values(), whole_step=True, **common)]
    jobs = []
    for variant in step.variants:
        if (backend, variant.key) in seen:
            continue
        seen.add((backend, variant.key))
        single = step.single(variant)
        jobs.append(Job(key=variant.key, keys=[variant.key], step=single, values=single.call_values(), **common))
    return jobs


# --- the manifest -------------------------------------------------------------------------------------

def triton_cache_dir() -> str:
    """Triton's file cache: $TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache (as triton.knobs)."""
    path = os.environ.get("TRITON_CACHE_DIR")
    if path:
        return path
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~/"), ".triton", "cache")


def manifest_path() -> str | None:
    """Where the manifest lives; None when Triton uses another cache manager (no known directory)."""
    if os.environ.get("TRITON_CACHE_MANAGER") or os.environ.get("TRITON_REMOTE_CACHE_BACKEND"):
        return None
    return os.path.join(triton_cache_dir(), MANIFEST_NAME)


def _dist_version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - a source build without metadata
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None)
        try:
            return f"mtime:{int(os.stat(origin).st_mtime)}" if origin else "?"
        except OSError:
            return "?"


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sources_digest(root: str | None = None) -> str:
    root = root or _repo_root()
    paths = []
    for parts in SOURCE_GLOBS:
        folder = os.path.join(root, *parts)
        if os.path.isdir(folder):
            paths += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".py")]
    paths += [os.path.join(root, *parts) for parts in SOURCE_FILES]
    h = hashlib.sha256()
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        h.update(os.path.relpath(path, root).encode() + b"\0" + data + b"\0")
    return "sha256:" + h.hexdigest()


def gpu_models() -> list[str]:
    """GPU models from the driver's /proc entries (cheap: no CUDA initialisation)."""
    base = "/proc/driver/nvidia/gpus"
    out = set()
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "information"), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Model:"):
                        out.add(line.split(":", 1)[1].strip())
        except OSError:
            pass
    return sorted(out)


def gpu_capability() -> int | None:
    """The GPUs' compute capability (90 for sm_90) from NVML, which creates no CUDA context;
    None when unknown: no NVML, or GPUs of different capabilities (which one the main
    process will use is then CUDA's to say, and workers ask CUDA themselves)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    caps = set()
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
                return None
            caps.add(major.value * 10 + minor.value)
    finally:
        nvml.nvmlShutdown()
    return caps.pop() if len(caps) == 1 else None


def worker_setup(device: str) -> dict:
    """What a worker takes from the main process: its TRITON_/DG_/WARMUP_ settings (the
    fork server may have started under others) and the GPU target to compile for."""
    env = {k: v for k, v in os.environ.items() if k.startswith(WORKER_ENV_PREFIXES)}
    capability = gpu_capability() if str(device).startswith("cuda") else None
    return {"env": env, "capability": capability}


def _apply_setup(setup: dict) -> None:
    for key in [k for k in os.environ if k.startswith(WORKER_ENV_PREFIXES)]:
        if key not in setup["env"]:
            del os.environ[key]
    os.environ.update(setup["env"])


def fingerprint() -> dict:
    """What must match for a manifest's keys to still be in the disk cache."""
    skip = ("TRITON_CACHE_DIR", "TRITON_HOME", "DG_JIT_CACHE_DIR")
    return {"triton": _dist_version("triton"), "torch": _dist_version("torch"),
            "deep_gemm": _dist_version("deep_gemm"), "sources": sources_digest(), "gpus": gpu_models(),
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("TRITON_", "DG_")) and k not in skip}}


def _deep_gemm_cache_id() -> list | None:
    path = deep_gemm_cache_dir()
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def read_manifest(path: str | None, fp: dict | None = None) -> dict:
    """{backend: set of keys} of a manifest that matches this fingerprint ({} otherwise)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        return {}
    if doc.get("fingerprint") != (fp if fp is not None else fingerprint()):
        return {}
    keys = doc.get("keys")
    if not isinstance(keys, dict):
        return {}
    out = {b: set(map(str, v)) for b, v in keys.items() if isinstance(v, list)}
    if "deep_gemm" in out and doc.get("deep_gemm_cache") != _deep_gemm_cache_id():
        out.pop("deep_gemm")  # DeepGEMM's cache lives elsewhere: wiped or replaced since
    return out


def update_manifest(path: str | None, add: dict, fp: dict | None = None) -> int:
    """Add {backend: keys} to the manifest (merging a matching one), atomically. Returns the keys written."""
    if not path or not any(add.values()):
        return 0
    from planner.output import write_atomic

    fp = fp if fp is not None else fingerprint()
    merged = read_manifest(path, fp)
    for backend, keys in add.items():
        if keys:
            merged.setdefault(backend, set()).update(keys)
    doc = {"format": MANIFEST_FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "fingerprint": fp, "deep_gemm_cache": _deep_gemm_cache_id(),
           "keys": {b: sorted(k) for b, k in sorted(merged.items())}}
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return sum(len(k) for k in merged.values())


# --- the worker side ------------------------------------------------------------------------------------

def prime_triton() -> None:
    """Pay Triton's fixed per-process costs now rather than at the first kernel: the hash of
    Triton's own sources and libtriton (hundreds of MB, part of every cache key) and the
    backend's hash (it runs ptxas --version), for the active driver's target. Best effort;
    the fork server did both already when it could (executor/worker_preload.py)."""
    from triton.runtime.driver import driver

    active = driver.active
    active.get_current_device()
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001 - another Triton: the first kernel pays it
        pass
    try:
        from triton.compiler.compiler import make_backend

        make_backend(active.get_current_target()).hash()
    except Exception:  # noqa: BLE001
        pass


_WORKER: dict | None = None


def _init_worker(specs: dict, device: str, monitor_mode: str, options, setup: dict) -> None:
    """Pool initializer: settings, Triton's target, backends, Triton's per-process costs and
    the JIT monitor, once per worker.

    Never raises (a failing initializer would break the whole pool): errors are kept and
    each job of the backend reports them."""
    global _WORKER
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    except (ValueError, OSError):
        pass
    start = time.perf_counter()
    state = {"backends": {}, "errors": {}, "monitor": None, "device": device, "pid": os.getpid(),
             "target": None}
    _WORKER = state
    try:
        _apply_setup(setup)
        if setup.get("capability") and "triton" in specs:
            from executor.kernels.jit import stand_in

            stand_in.use_offline_driver(setup["capability"])
            state["target"] = f"cuda:{setup['capability']}"
    except Exception as e:  # noqa: BLE001 - Triton's own driver compiles instead (slower)
        state["errors"]["target"] = f"{type(e).__name__}: {e}"
    try:
        from .jit_monitor import Monitor

        state["monitor"] = Monitor("warn" if monitor_mode != "off" else "off").install()
    except Exception as e:  # noqa: BLE001
        state["errors"]["monitor"] = f"{type(e).__name__}: {e}"
    for name, (module, cls) in specs.items():
        try:
            instance = getattr(importlib.import_module(module), cls)(device, options)
            ok, why = instance.available()
        except Exception as e:  # noqa: BLE001
            ok, why = False, f"{type(e).__name__}: {e}"
        if ok:
            state["backends"][name] = instance
        else:
            state["errors"][name] = why or "unavailable"
    if state["target"]:
        # Triton's fixed per-process costs, for the offline target: no CUDA context, no torch.
        # (Without a target, Triton's own driver would create a context here: the jobs do it.)
        try:
            prime_triton()
        except Exception as e:  # noqa: BLE001 - the jobs will say it
            state["errors"]["prime"] = f"{type(e).__name__}: {e}"
    state["init_s"] = round(time.perf_counter() - start, 3)


def build_cuda_utils() -> float:
    """Build Triton's CUDA utils module (C, compiled with gcc into the shared cache; no CUDA
    call) for the main process, which would otherwise build it at its first kernel: 0.7-0.9 s
    on an empty cache (H100 host, 2026-11-23). Workers compiling offline never need it."""
    began = time.perf_counter()
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()
    return round(time.perf_counter() - began, 3)


def _ready() -> dict:
    """A no-op task: submitting one per worker starts them all at once."""
    state = _WORKER or {}
    return {"pid": os.getpid(), "init_s": state.get("init_s"), "errors": dict(state.get("errors") or {}),
            "time": time.time()}


def worker_context(with_torch: bool = False):
    """How workers start: forked from a fork server that imported Triton and the kernels
    once (executor/worker_preload.py; torch too when a backend's jobs need it: DeepGEMM's),
    else spawned (each imports them itself). The fork server is one per process: the first
    pool's preload list is the one it keeps."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:  # a platform without fork
        return multiprocessing.get_context("spawn")
    ctx.set_forkserver_preload((["torch"] if with_torch else []) + ["executor.worker_preload"])
    return ctx


def _first_line(text, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_job(job: dict) -> dict:
    """Run one job in this worker; returns its record (never raises: errors are data)."""
    state = _WORKER
    out = {"key": job["key"], "keys": job["keys"], "step": job["step_id"], "backend": job["backend"],
           "kind": job["kind"], "whole_step": job.get("whole_step", False), "values": len(job["values"]),
           "status": "ok", "error": None, "pid": os.getpid(), "compiled": None, "disk_loads": None,
           "compile_ms": None, "deep_gemm_jit": None, "start": time.time()}
    if state is None:
        out.update(status="failed", error="worker not initialised", end=time.time(), wall_s=0.0)
        return out
    backend = state["backends"].get(job["backend"])
    monitor = state["monitor"]
    t0 = time.perf_counter()
    if backend is None:
        why = state["errors"].get(job["backend"]) or "backend not loaded in the worker"
        out.update(status="unavailable", error=_first_line(why), end=time.time(), wall_s=0.0)
        return out
    if monitor is not None:
        monitor.begin_step(job["key"])
    step, values = job["step"], job["values"]
    try:
        method = getattr(backend, job["step"].family)
        method(step, values, lambda n: None)
        backend.synchronize()
    except Exception as e:  # noqa: BLE001 - every failure is the job's, the main process compiles it
        from .backends.base import Unavailable, is_oom

        out["status"] = "unavailable" if isinstance(e, Unavailable) else "failed"
        out["error"] = _first_line(f"{type(e).__name__}: {e}")
        if is_oom(e):
            out["oom"] = True
    finally:
        out["wall_s"] = round(time.perf_counter() - t0, 4)
        out["end"] = time.time()
        counts = monitor.end_step() if monitor is not None else None
        if counts is not None:
            out.update(compiled=counts.compiled, disk_loads=counts.disk_loads,
                       compile_ms=round(counts.compile_ms, 3), deep_gemm_jit=counts.deep_gemm_jit)
        _free(backend, step, state["device"])
    return out


def _free(backend, step: dict, device: str) -> None:
    try:
        backend.release(step)
    except Exception:  # noqa: BLE001
        pass
    torch = sys.modules.get("torch")
    try:
        if torch is not None and str(device).startswith("cuda") and torch.cuda.is_initialized():
            if torch.cuda.memory_reserved() > EMPTY_CACHE_BYTES:
                torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


# --- the main process ------------------------------------------------------------------------------------

@dataclass
class _Slot:
    job: Job
    future: object = None
    result: dict | None = None
    submitted: float | None = None


@dataclass
class _StepInfo:
    keys: list = field(default_factory=list)   # (backend, key) of the step
    jobs: list = field(default_factory=list)   # slots whose first step is this one


class Precompiler:
    """The precompile phase of one run (see the module docstring)."""

    def __init__(self, steps: list[dict], options, backend_of, progress=None):
        self.steps = steps
        self.options = options
        self.backend_of = backend_of
        self.progress = progress
        self.requested = int(getattr(options, "jobs", 0) or 0)
        self.backends = tuple(getattr(options, "precompile_backends", None) or PRECOMPILE_BACKENDS)
        self.device = str(getattr(options, "device", "cuda"))
        self.status = "off"            # off | skipped | ran | cancelled
        self.reason: str | None = None
        self.manifest = manifest_path()
        self._fp: dict | None = None
        self.keys_planned = 0
        self.keys_in_manifest = 0
        self.slots: list[_Slot] = []
        self.by_key: dict = {}         # (backend, key) -> slot
        self.info: dict = {}           # step id -> _StepInfo
        self.workers = 0
        self.pool = None
        self.ready: list[dict] = []
        self.created: float | None = None   # time.time() of the pool's start
        self.start_s: float | None = None   # seconds the caller spent in start()
        self.spawned_s: float | None = None  # pool start -> every worker process started
        self.close_s: float | None = None   # seconds the caller spent in close()
        self._started = threading.Event()   # set once the starter thread submitted the first jobs
        self._start_error: str | None = None
        self.ready_at: float | None = None
        self.specs: dict = {}               # backend -> (module, class) the workers run
        self.setup: dict | None = None     # what the workers were started with (worker_setup)
        self.utils_s = None                # seconds a worker spent building Triton's CUDA utils (or why not)
        self.finished_at: float | None = None
        self.manifest_written: int | None = None
        self._lock = threading.Lock()
        self._announced = False
        self._dg_barrier_done = False
        self._released = -2

    # --- start -----------------------------------------------------------------------------

    def start(self) -> "Precompiler":
        """Decide, then start the pool and submit the jobs that need no earlier step."""
        began = time.perf_counter()
        try:
            return self._start()
        finally:
            self.start_s = round(time.perf_counter() - began, 4)

    def _start(self) -> "Precompiler":
        why_not = self._effective_backends()
        for step in self.steps:
            backend = eligible(step, self.backend_of, self.backends)
            if backend is not None:
                self.info[step.id] = _StepInfo(keys=[(backend, k) for k in step_keys(step)])
        planned = {key for info in self.info.values() for key in info.keys}
        self.keys_planned = len(planned)
        if self.requested <= 1:
            return self._skip("off", f"--jobs {self.requested}: variants compile in the main process")
        if not planned:
            return self._skip("off", "; ".join(why_not) or "nothing to precompile (no gemm, grouped_gemm, kernel or "
                                                         f"attention step of {', '.join(self.backends)})")
        have_sets = read_manifest(self.manifest, self.fingerprint())
        have = {(b, k) for b, keys in have_sets.items() for k in keys}
        self.keys_in_manifest = len(planned & have)
        jobs = compile_jobs(self.steps, self.backend_of, self.backends, have)
        if not jobs:
            return self._skip("skipped", f"all {self.keys_planned} compile keys are in the disk cache "
                                         f"(manifest {self.manifest})")
        self.slots = [_Slot(job) for job in jobs]
        for slot in self.slots:
            for key in slot.job.keys:
                self.by_key.setdefault((slot.job.backend, key), slot)
            self.info[slot.job.step_id].jobs.append(slot)
        self.workers = min(self.requested, len(jobs))
        self.status = "ran"
        self._start_pool()
        return self

    def _effective_backends(self) -> list[str]:
        """Drop the backends that cannot compile here (no CUDA device, library missing); say why."""
        why = []
        if not self.device.startswith("cuda"):
            gpu = [b for b in self.backends if b in GPU_BACKENDS]
            if gpu:
                why.append(f"device {self.device}: {', '.join(gpu)} compile nothing off a CUDA device")
            self.backends = tuple(b for b in self.backends if b not in GPU_BACKENDS)
        need = {"triton": ("triton",), "deep_gemm": ("torch", "deep_gemm")}
        for backend in list(self.backends):
            missing = [m for m in need.get(backend, ()) if importlib.util.find_spec(m) is None]
            if missing:
                why.append(f"{backend}: {missing[0]} is not installed")
                self.backends = tuple(b for b in self.backends if b != backend)
        return why

    def _skip(self, status: str, reason: str) -> "Precompiler":
        self.status, self.reason = status, reason
        if status == "skipped":
            self._announce()
        return self

    def fingerprint(self) -> dict:
        if self._fp is None:
            self._fp = fingerprint()
        return self._fp

    def _specs(self) -> dict:
        """The class each worker runs a backend with: its compile-only twin where it has one."""
        names = sorted({s.job.backend for s in self.slots})
        return {name: WORKER_CLASSES.get(name, registry.BACKENDS[name]) for name in names if name in registry.BACKENDS}

    def _start_pool(self) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.created = time.time()
        mode = getattr(self.options, "jit_monitor", "warn")
        self.specs = specs = self._specs()
        self.setup = worker_setup(self.device)
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=worker_context(with_torch="deep_gemm" in specs),
                                        initializer=_init_worker,
                                        initargs=(specs, self.device, mode, self.options, self.setup))
        threading.Thread(target=self._spawn, name="warmup-precompile-start", daemon=True).start()

    def _spawn(self) -> None:
        """The starter thread: start every worker (a submit starts a process, and the first
        one waits for the fork server to finish importing), then submit the first jobs."""
        try:
            for _ in range(self.workers):  # one no-op each: every worker starts now, not at its first job
                fut = self.pool.submit(_ready)
                fut.add_done_callback(self._on_ready)
            self.spawned_s = round(time.time() - self.created, 3)
            if (self.setup or {}).get("capability") and "triton" in self.specs:
                self.pool.submit(build_cuda_utils).add_done_callback(self._on_utils)
            self._submit(-1)
        except Exception as e:  # noqa: BLE001 - the jobs left unsubmitted are compiled by the main process
            self._start_error = f"{type(e).__name__}: {e}"
        finally:
            self._started.set()

    def _on_utils(self, fut) -> None:
        try:
            self.utils_s = fut.result()
        except BaseException as e:  # noqa: BLE001 - the main process builds it at its first kernel
            self.utils_s = f"{type(e).__name__}: {e}"

    def _await_start(self) -> None:
        if self.pool is not None:
            self._started.wait()

    def _on_ready(self, fut) -> None:
        try:
            info = fut.result()
        except BaseException as e:  # noqa: BLE001
            info = {"error": f"{type(e).__name__}: {e}", "time": time.time()}
        with self._lock:
            self.ready.append(info)
            if self.ready_at is None:
                self.ready_at = info.get("time") or time.time()

    # --- during the run --------------------------------------------------------------------------

    def release(self, index: int) -> None:
        """Submit the jobs whose last autotune step is at or before `index` (DeepGEMM first)."""
        self._await_start()
        self._submit(index)

    def _submit(self, index: int) -> None:
        if self.pool is None or index <= self._released:
            return
        self._released = index
        todo = [s for s in self.slots if s.future is None and s.job.release <= index]
        todo.sort(key=lambda s: (s.job.backend != "deep_gemm", s.job.index))
        for slot in todo:
            try:
                slot.future = self.pool.submit(run_job, slot.job.payload())
            except Exception as e:  # noqa: BLE001 - a broken pool: the main process compiles
                slot.result = self._failed(slot, f"not submitted ({type(e).__name__}: {e})")
                continue
            slot.submitted = time.time()
            slot.future.add_done_callback(lambda fut, slot=slot: self._on_done(slot, fut))

    def after_step(self, step: dict, index: int) -> None:
        if isinstance(step, Autotune):
            self.release(index)
        self._maybe_finish()

    def _on_done(self, slot: _Slot, fut) -> None:
        if fut.cancelled():
            result = self._failed(slot, "cancelled", status="cancelled")
        else:
            try:
                result = fut.result()
            except BaseException as e:  # noqa: BLE001 - a crashed worker (BrokenProcessPool)
                result = self._failed(slot, f"{type(e).__name__}: {e}")
        with self._lock:
            if slot.result is None:  # the first word stays (cancel() may have spoken already)
                slot.result = result

    def _failed(self, slot: _Slot, why: str, status: str = "failed") -> dict:
        job = slot.job
        now = time.time()
        return {"key": job.key, "keys": job.keys, "step": job.step_id, "backend": job.backend, "kind": job.kind,
                "whole_step": job.whole_step, "values": len(job.values), "status": status, "error": why,
                "pid": None, "compiled": None, "disk_loads": None, "compile_ms": None, "deep_gemm_jit": None,
                "start": now, "end": now, "wall_s": 0.0}

    def wait_for(self, step: dict) -> float:
        """Block until the jobs of this step's keys are done; returns the seconds waited."""
        info = self.info.get(step.id)
        if self.pool is None or info is None:
            return 0.0
        start = time.perf_counter()
        self._await_start()  # the first jobs' futures exist from here
        futures = {self.by_key[k].future for k in info.keys if k in self.by_key}
        if not self._dg_barrier_done and futures:
            self._dg_barrier_done = True
            futures |= {s.future for s in self.slots if s.job.backend == "deep_gemm"}
        futures = {f for f in futures if f is not None and not f.done()}
        if futures:
            from concurrent.futures import wait

            wait(futures)
        for slot in [self.by_key[k] for k in info.keys if k in self.by_key]:
            self._settle(slot)
        waited = time.perf_counter() - start
        self._maybe_finish()
        return waited

    def _settle(self, slot: _Slot) -> None:
        """Done callbacks run on the pool's thread: make sure the result is here."""
        if slot.result is None and slot.future is not None and slot.future.done():
            self._on_done(slot, slot.future)

    def _maybe_finish(self) -> None:
        if self.pool is None or not self._started.is_set():
            return
        if any(s.future is None and s.result is None for s in self.slots):
            return
        if all(s.future is None or s.future.done() for s in self.slots):
            for slot in self.slots:
                self._settle(slot)
            self._shutdown(wait=False)  # idle workers exit on their own; nobody waits for them
            self._announce()

    def annotate(self, record: dict, waited: float) -> None:
        """Attribute the step's own jobs (those of keys it reaches first) to its record."""
        info = self.info.get(record["id"])
        if info is None or self.status != "ran":
            return
        results = [s.result for s in info.jobs if s.result is not None]
        record["precompile"] = {
            "keys": len(info.keys), "jobs": len(info.jobs),
            "compiled": _sum(r.get("compiled") for r in results),
            "disk_loads": _sum(r.get("disk_loads") for r in results),
            "compile_s": round(sum(r.get("wall_s") or 0.0 for r in results), 4),
            "failed": sum(r["status"] != "ok" for r in results),
            "wait_s": round(waited, 4),
        }

    def cancel(self, why: str) -> None:
        """Stop: drop queued jobs, end the workers (a job cut short leaves no partial entry)."""
        if self.pool is None:
            return
        self._await_start()
        for slot in self.slots:
            if slot.future is None and slot.result is None:
                slot.result = self._failed(slot, why, status="cancelled")
            elif slot.future is not None and not slot.future.done():
                slot.future.cancel()
        self._shutdown(wait=False, kill=True)
        for slot in self.slots:
            self._settle(slot)
            if slot.result is None:
                slot.result = self._failed(slot, why, status="cancelled")
        if self.status == "ran":
            self.status = "cancelled"
            self.reason = why

    def _shutdown(self, wait: bool, kill: bool = False) -> None:
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if self.finished_at is None:
            self.finished_at = time.time()
        processes = list((getattr(pool, "_processes", None) or {}).values())
        try:
            pool.shutdown(wait=wait and not kill, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass
        if kill:
            for proc in processes:  # only this pool's own workers, by their handles
                try:
                    if proc.is_alive():
                        proc.terminate()
                except Exception:  # noqa: BLE001
                    pass
            for proc in processes:
                try:
                    proc.join(5)
                except Exception:  # noqa: BLE001
                    pass

    def close(self, interrupted: bool = False) -> None:
        began = time.perf_counter()
        try:
            self._close(interrupted)
        finally:
            if self.status in ("ran", "cancelled"):
                self.close_s = round((self.close_s or 0.0) + time.perf_counter() - began, 4)

    def _close(self, interrupted: bool) -> None:
        if self.pool is None:
            return
        self._await_start()
        if interrupted:
            self.cancel("interrupted (Ctrl-C)")
            return
        for slot in self.slots:
            if slot.future is None and slot.result is None:  # never released (the run stopped early)
                slot.result = self._failed(slot, "not run: the run ended first", status="cancelled")
        from concurrent.futures import wait

        wait([s.future for s in self.slots if s.future is not None])
        for slot in self.slots:
            self._settle(slot)
        self._shutdown(wait=False)
        self._announce()

    # --- results --------------------------------------------------------------------------------------

    def results(self) -> list[dict]:
        return [s.result for s in self.slots if s.result is not None]

    def summary(self) -> dict:
        out = {"status": self.status, "reason": self.reason, "jobs_option": self.requested,
               "workers": self.workers, "jobs": len(self.slots), "keys_planned": self.keys_planned,
               "keys_in_manifest": self.keys_in_manifest, "manifest": self.manifest,
               "manifest_keys_written": self.manifest_written}
        results = self.results()
        if not self.slots:
            return out
        ran = [r for r in results if r.get("pid") is not None]
        busy = sum(r.get("wall_s") or 0.0 for r in ran)
        if ran:
            first = min(r["start"] for r in ran)
            last = max(r["end"] for r in ran)
            wall = max(last - first, 1e-9)
        else:
            first = last = None
            wall = 0.0
        out.update({
            "wall_s": round(wall, 3),
            "busy_s": round(busy, 3),                       # the jobs' own seconds, summed over workers
            "compile_s": round(_sum((r.get("compile_ms") for r in ran), 0.0) / 1000.0, 3),  # Triton's own
            "speedup": round(busy / wall, 2) if ran and wall > 0 else None,
            "start_s": self.start_s,                        # the caller's time in start()
            "spawned_s": self.spawned_s,                    # pool start -> every worker process started
            "close_s": self.close_s,                        # the caller's time in close()
            "start_error": self._start_error,
            "first_worker_ready_s": (round(self.ready_at - self.created, 3)
                                     if self.ready_at and self.created else None),
            "first_job_s": round(first - self.created, 3) if first is not None and self.created else None,
            "compiled": _sum(r.get("compiled") for r in results),
            "disk_loads": _sum(r.get("disk_loads") for r in results),
            "deep_gemm_jit": _sum(r.get("deep_gemm_jit") for r in results),
            "ok": sum(r["status"] == "ok" for r in results),
            "failed": sum(r["status"] == "failed" for r in results),
            "unavailable": sum(r["status"] == "unavailable" for r in results),
            "cancelled": sum(r["status"] == "cancelled" for r in results),
            "worker_init_s": sorted(i["init_s"] for i in self.ready if i.get("init_s") is not None),
            "target": (self.setup or {}).get("capability"),  # compiled for cuda:<this> without CUDA; None: CUDA asked
            "cuda_utils_s": self.utils_s,
            "records": [_public(r, self.created) for r in results],
        })
        return out

    def _announce(self) -> None:
        if self._announced or self.progress is None:
            return
        self._announced = True
        self.progress.precompile(self.summary())

    # --- the manifest --------------------------------------------------------------------------------

    def write_manifest(self, records: list[dict]) -> None:
        """Record the keys now in the disk cache: ok jobs, and ok steps run by their planned backend."""
        add: dict = {}
        for result in self.results():
            if result["status"] == "ok":
                add.setdefault(result["backend"], set()).update(result["keys"])
        steps = {s.id: s for s in self.steps}
        for record in records:
            info = self.info.get(record["id"])
            step = steps.get(record["id"])
            if info is None or step is None or record["status"] != "ok":
                continue
            if record.get("backend") != getattr(step, "backend", None) or record["backend"] not in self.backends:
                continue
            for backend, key in info.keys:
                add.setdefault(backend, set()).add(key)
        if not any(add.values()):
            return
        try:
            self.manifest_written = update_manifest(self.manifest, add, self.fingerprint())
        except OSError:
            self.manifest_written = None


def _sum(values, empty=None):
    values = [v for v in values if v is not None]
    return sum(values) if values else empty


def _public(result: dict, created: float | None) -> dict:
    """A job's record for the report: times relative to the pool's start."""
    out = {k: v for k, v in result.items() if k not in ("start", "end", "keys")}
    out["keys"] = len(result.get("keys") or [])
    if created is not None and result.get("pid") is not None:
        out["start_s"] = round(result["start"] - created, 3)
        out["end_s"] = round(result["end"] - created, 3)
    return out
