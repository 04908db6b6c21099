"""`flashinfer`: FlashInfer's autotuner around one tuning run (vllm-warmup.md §4.2, §5).

The `autotune` step (library flashinfer) runs inside ``flashinfer.autotune(True)``:
with ``cache: persistent`` the cache file is loaded before (``AutoTuner.load_configs``)
and saved after (``AutoTuner.save_configs``, which FlashInfer writes atomically); with
``cache: memory`` results live in this process only. The tuning run is the model
runner's ``dummy_run(num_tokens)`` when the runner has one (vLLM profiles one eager
forward at max_num_batched_tokens, and FlashInfer tunes every op at the buckets it
derives from it); without one, ``flashinfer.gemm.bmm_fp8`` runs at num_tokens for
every linear shape of the engine, so FlashInfer's FP8 GEMM tuner covers those shapes.
Tuning never runs inside CUDA-graph capture (FlashInfer refuses it too).
"""

from __future__ import annotations

import importlib
import importlib.util
import os

from .base import BaseBackend, Unavailable, torch_cuda_available


def default_cache_path(version: str, device_name: str) -> str:
    root = os.environ.get("WARMUP_FLASHINFER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "warmup-planner", "flashinfer_autotune")
    return os.path.join(root, version, device_name.replace(" ", "_"), "autotune_configs.json")


class FlashInferBackend(BaseBackend):
    name = "flashinfer"
    families = ("autotune",)

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("flashinfer") is None:
            return False, "flashinfer is not installed (pip install flashinfer-python)"
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            fi = importlib.import_module("flashinfer")
        except Exception as e:  # noqa: BLE001
            return False, f"flashinfer failed to import ({type(e).__name__}: {e})"
        if not hasattr(fi, "autotune"):
            return False, f"flashinfer {getattr(fi, '__version__', '?')} has no autotune()"
        return True, ""

    def autotune(self, step, tick, ctx):
        import torch

        import flashinfer
        from flashinfer.autotuner import AutoTuner

        if torch.cuda.is_current_stream_capturing() or getattr(ctx, "capturing", False):
            raise RuntimeError("refusing to autotune during CUDA-graph capture")
        num_tokens = int(step["num_tokens"])
        tuner = AutoTuner.get()
        details = {"library": "flashinfer", "version": getattr(flashinfer, "__version__", "?"),
                   "num_tokens": num_tokens, "cache": step.get("cache", "memory")}
        path = None
        if step.get("cache") == "persistent":
            path = getattr(self.options, "flashinfer_cache", None) or default_cache_path(
                details["version"], torch.cuda.get_device_name(self.device))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            details["cache_file"] = path
            details["cache_loaded"] = bool(os.path.isfile(path) and tuner.load_configs(path))
        runner = ctx.get_runner(required=False) if hasattr(ctx, "get_runner") else None
        with torch.inference_mode(), flashinfer.autotune(True):
            if runner is not None and hasattr(runner, "dummy_run"):
                details["tuning_run"] = "runner.dummy_run"
                runner.dummy_run(num_tokens)
                calls = 1
            else:
                details["tuning_run"] = "flashinfer.gemm.bmm_fp8 over the engine's linear shapes"
                calls = self._gemm_run(num_tokens, ctx)
        torch.cuda.synchronize(self.device)
        tick(calls)
        if path is not None:
            tuner.save_configs(path)
            details["cache_saved"] = True
        details["calls"] = calls
        return details

    def _gemm_run(self, num_tokens: int, ctx) -> int:
        import torch

        from flashinfer.gemm import bmm_fp8

        engine = getattr(ctx, "engine", None)
        if not engine:
            raise Unavailable("flashinfer autotune without a model runner needs the engine config")
        shapes = sorted({(lin["n"], lin["k"]) for lin in engine["model"]["linear"]})
        dev, fp8 = self.device, torch.float8_e4m3fn
        one = torch.ones((), device=dev, dtype=torch.float32)
        for n, k in shapes:
            a = torch.zeros(1, num_tokens, k, device=dev, dtype=fp8)
            b = torch.zeros(1, n, k, device=dev, dtype=fp8).transpose(1, 2)  # column-major (k, n)
            bmm_fp8(a, b, one, one, dtype=torch.bfloat16)
        return len(shapes)
