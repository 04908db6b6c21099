"""`flashinfer`: FlashInfer's autotuner around one tuning run.

vLLM's `flashinfer_autotune` (vllm/model_executor/warmup/kernel_warmup.py, vLLM @ 017e9f4448b7,
as last changed by PR #50892, f18e10a7e) around FlashInfer's `AutoTuner`
(flashinfer/autotuner/autotuner.py, FlashInfer @ fb28d7242b35, v0.6.18).

The `autotune` step (library flashinfer) does what vLLM's ``flashinfer_autotune`` does: one
run at ``num_tokens`` inside ``flashinfer.autotuner.autotune(True)``, in inference mode, never
during CUDA-graph capture. FlashInfer profiles every tunable op it meets at the token buckets
it derives from the size it sees (``get_hybrid_num_tokens_buckets``: 21 buckets for 8192
tokens), so one run at the largest size tunes them all.

What runs inside the context:

* the model runner's ``dummy_run(num_tokens)`` when the runner has one (vLLM profiles one
  eager forward at max_num_batched_tokens);
* otherwise FlashInfer's FP8 GEMM, ``flashinfer.gemm.bmm_fp8(..., backend="auto")`` (custom op
  ``fp8_gemm``; on SM90 its cuBLASLt runner, whose tactics are the cuBLASLt algorithms, plus
  the cuDNN runner when cudnn-frontend is installed), once at num_tokens for every distinct
  (N, K) of the engine's FP8 linear layers. That is the FlashInfer-tuned op of a dense FP8
  model whose JIT build is small; the op vLLM tunes on Hopper, the CUTLASS fused MoE, needs a
  far larger JIT module (both measured by bench/flashinfer_gpu.py: bench/RESULTS.md, part F).

``cache: persistent`` (the file is ``--flashinfer-cache`` or, by default,
``~/.cache/warmup-planner/flashinfer_autotune/<version>/<gpu>/autotune_configs.json``: the family's
one default, executor/caches/flashinfer_file.py ``default_path``, where ``warmup bundle install``
places a plan bundle's file too):

* FlashInfer >= 0.6.x with ``autotune(cache=...)``: the library loads the file on entry
  (configs from another environment are ignored, see ``AutoTuner.load_configs``) and, only
  when something new was tuned, saves it on exit, merged with what is on disk, through
  ``tempfile.mkstemp`` in the same directory and ``os.replace`` (atomic);
* older versions with ``load_configs``/``save_configs`` only: loaded before, and saved after
  through planner.output's writer (atomic_save_configs), so that a crash leaves the old file
  or the new one, never half of one;
* versions without either: tuned in memory, and the details say why nothing was saved.

``cache: memory``: the results live in this process only.

The details report the tactics profiled (``AutoTuner._profile_single_kernel`` calls), the
profiles (op x runner x bucket) tuned, the cache entries loaded and whether the file was
written; a second run that loads a complete cache profiles nothing. Missing or broken
FlashInfer, no GPU or a GPU below SM90 make the step `unavailable` with the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import tempfile
import time

from planner.engine.queries import fp8_shapes
from planner.output import write_atomic

from ..caches.flashinfer_file import default_path
from .base import BaseBackend, Unavailable, torch_cuda_available

MIN_CAPABILITY = (9, 0)  # vLLM: has_device_capability(90) before flashinfer_autotune
GEMM_OP = "flashinfer.gemm.bmm_fp8"


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent that fails, or sys.modules[name] = None
        return None


def _file_state(path: str | None):
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st else None


def atomic_save_configs(tuner, path: str) -> None:
    """``tuner.save_configs`` into a private temporary folder (it writes by name, and some merge
    with a file already there: it gets none), checked to parse, then written at `path` by the one
    writer of every output (planner.output.write_atomic: whole, through a link or into a device,
    the mode kept)."""
    with tempfile.TemporaryDirectory(prefix="warmup-autotune-") as folder:
        saved = os.path.join(folder, "configs.json")
        tuner.save_configs(saved)
        with open(saved, encoding="utf-8") as f:
            text = f.read()
        json.loads(text)  # never replace a good cache with a file that does not parse
    write_atomic(path, text)


class _ProfileCounter:
    """Counts ``AutoTuner._profile_single_kernel`` calls (one per tactic profiled) while entered."""

    def __init__(self, tuner):
        self.tuner = tuner
        self.calls: int | None = None
        self.by_op: dict = {}

    def __enter__(self):
        original = getattr(self.tuner, "_profile_single_kernel", None)
        if original is None or "_profile_single_kernel" in vars(self.tuner):
            return self  # unknown version, or already wrapped: count nothing rather than twice
        self.calls = 0

        def counted(runner, *args, **kwargs):
            self.calls += 1
            name = type(runner).__name__
            self.by_op[name] = self.by_op.get(name, 0) + 1
            return original(runner, *args, **kwargs)

        self.tuner._profile_single_kernel = counted
        return self

    def __exit__(self, *exc):
        vars(self.tuner).pop("_profile_single_kernel", None)
        return False


class FlashInferBackend(BaseBackend):
    name = "flashinfer"
    families = ("autotune",)

    def available(self) -> tuple[bool, str]:
        if _find_spec("flashinfer") is None:
            return False, "flashinfer is not installed (pip install flashinfer-python)"
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            fi = importlib.import_module("flashinfer")
            at = importlib.import_module("flashinfer.autotuner")
        except Exception as e:  # noqa: BLE001
            return False, f"flashinfer failed to import ({type(e).__name__}: {e})"
        version = getattr(fi, "__version__", "?")
        if not hasattr(at, "autotune") or not hasattr(at, "AutoTuner"):
            return False, f"flashinfer {version} has no flashinfer.autotuner.autotune / AutoTuner"
        if str(self.device).startswith("cuda"):
            import torch

            cap = tuple(torch.cuda.get_device_capability(self.device))
            if cap < MIN_CAPABILITY:
                return False, (f"FlashInfer autotune needs SM{MIN_CAPABILITY[0]}{MIN_CAPABILITY[1]} "
                               f"or later (this GPU is SM{cap[0]}{cap[1]})")
        return True, ""

    def autotune(self, step, tick, ctx):
        import torch

        import flashinfer
        from flashinfer import autotuner as fi_autotuner

        if getattr(ctx, "capturing", False) or (
                str(self.device).startswith("cuda") and torch.cuda.is_current_stream_capturing()):
            raise RuntimeError("refusing to autotune during CUDA-graph capture")
        runner, shapes = self._tuning_run_inputs(ctx)
        version = getattr(flashinfer, "__version__", "?")
        tuner = fi_autotuner.AutoTuner.get()
        details = {"library": "flashinfer", "version": version, "num_tokens": step.num_tokens,
                   "cache": step.cache or "memory",
                   "plan_buckets": None if step.buckets is None else list(step.buckets)}
        path, native = self._cache_file(step, tuner, version, details)
        existed = _file_state(path)
        profiles_before = len(getattr(tuner, "profiling_cache", {}) or {})
        counter = _ProfileCounter(tuner)
        calls = self._tune(step, runner, shapes, tuner, counter, path, native, existed, details)
        self._save_cache(tuner, path, native, existed, version, details)
        details["profiles_tuned"] = len(getattr(tuner, "profiling_cache", {}) or {}) - profiles_before
        details["tactics_profiled"] = counter.calls
        if counter.by_op:
            details["tactics_profiled_by_runner"] = dict(sorted(counter.by_op.items()))
        details["calls"] = calls
        tick(counter.calls if counter.calls is not None else calls)
        return details

    def _tuning_run_inputs(self, ctx) -> tuple:
        """(the model runner, when it has dummy_run: it runs the whole forward; else None and the
        engine's FP8 linear shapes, for FlashInfer's FP8 GEMM tuner)."""
        runner = ctx.get_runner(required=False) if hasattr(ctx, "get_runner") else None
        if runner is not None and hasattr(runner, "dummy_run"):
            return runner, []
        engine = getattr(ctx, "engine", None)
        if engine is None:
            raise Unavailable("flashinfer autotune without a model runner needs the engine config")
        shapes = fp8_shapes(engine.model.linear)
        if not shapes:
            raise Unavailable("no model runner with dummy_run, and the engine has no FP8 linear layer "
                              f"for FlashInfer's FP8 GEMM tuner ({GEMM_OP})")
        return None, shapes

    def _cache_file(self, step, tuner, version: str, details: dict) -> tuple:
        """(the persistent cache file or None, whether this FlashInfer loads and saves it itself)."""
        import torch
        from flashinfer import autotuner as fi_autotuner

        if step.cache != "persistent":
            return None, False
        device_name = (torch.cuda.get_device_name(self.device)
                       if str(self.device).startswith("cuda") else str(self.device))
        path = getattr(self.options, "flashinfer_cache", None) or default_path(version, device_name)
        # a cache folder of ours (the default's, a bundle's); `execute --flashinfer-cache` refused a missing one
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        details["cache_file"] = path
        native = "cache" in inspect.signature(fi_autotuner.autotune).parameters
        details["cache_api"] = ("autotune(cache=...)" if native else
                                "load_configs/save_configs" if hasattr(tuner, "save_configs") else None)
        return path, native

    def _tune(self, step, runner, shapes, tuner, counter, path, native: bool, existed, details: dict) -> int:
        """The one tuning run inside ``autotune(True)``: the runner's dummy_run, or the FP8 GEMMs."""
        import torch
        from flashinfer import autotuner as fi_autotuner

        kwargs = {}
        if path is not None and native:
            kwargs["cache"] = path  # loaded on entry, saved atomically on exit when something was tuned
        elif path is not None and existed and hasattr(tuner, "load_configs"):
            details["cache_loaded"] = bool(tuner.load_configs(path))
        start = time.perf_counter()
        with counter, torch.inference_mode(), fi_autotuner.autotune(True, **kwargs):
            if path is not None and native:
                file_configs = getattr(tuner, "_file_configs", None)
                details["cache_entries_loaded"] = len(file_configs) if file_configs is not None else None
            if runner is not None:
                details["tuning_run"] = "runner.dummy_run"
                runner.dummy_run(step.num_tokens)
                calls = 1
            else:
                details["tuning_run"] = f"{GEMM_OP} (backend auto) over the engine's FP8 linear shapes"
                details["shapes"] = [list(s) for s in shapes]
                calls = self._gemm_run(step.num_tokens, shapes, step.randomize_inputs is not False)
            if str(self.device).startswith("cuda"):
                torch.cuda.synchronize(self.device)
        details["tune_s"] = round(time.perf_counter() - start, 3)
        return calls

    def _save_cache(self, tuner, path, native: bool, existed, version: str, details: dict) -> None:
        """Where FlashInfer does not save the file itself: save it atomically here."""
        if path is not None and not native:
            if hasattr(tuner, "save_configs"):
                atomic_save_configs(tuner, path)
            else:
                details["cache_error"] = (f"flashinfer {version} has neither autotune(cache=...) nor "
                                          "AutoTuner.save_configs: tuned in memory only")
        details["cache_written"] = path is not None and _file_state(path) not in (None, existed)

    def _gemm_run(self, num_tokens: int, shapes: list, randomize: bool) -> int:
        import torch

        from flashinfer.gemm import bmm_fp8

        dev, fp8 = self.device, torch.float8_e4m3fn
        one = torch.ones((), device=dev, dtype=torch.float32)

        def operand(rows: int, k: int):
            if randomize:
                return (torch.randn(1, rows, k, device=dev, dtype=torch.bfloat16) * 0.5).to(fp8)
            return torch.zeros(1, rows, k, device=dev, dtype=fp8)

        for n, k in shapes:
            a = operand(num_tokens, k)
            b = operand(n, k).transpose(1, 2)  # column-major (k, n), as bmm_fp8 wants
            bmm_fp8(a, b, one, one, dtype=torch.bfloat16, backend="auto")
            del a, b
        return len(shapes)
