"""The environment fingerprint a bundle is built in and checked against at install.

GPU name, SM count, compute capability, driver major, CUDA and NVCC versions, torch, triton,
DeepGEMM (version, header path and header content) and FlashInfer versions; for a bundle of a
vLLM start-up also vLLM's version and the hash of the configuration vLLM keys its torch.compile
cache with (``VllmConfig.compute_hash()``, which the plugin reads from the live config). Read in a
subprocess (``python -m executor.bundle.environment``) so that the command itself imports no
torch. ``mismatch`` names the first field that differs; DeepGEMM's header path is not a
mismatch: the install re-keys (2.5/2.6) or needs nothing (2.8).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kernel_model.device import capability_text

from .. import precompile
from ..caches import deep_gemm_rekey

FIELDS = ("gpu", "num_sms", "capability", "driver_major", "cuda", "nvcc", "torch", "triton",
          "deep_gemm_version", "deep_gemm_headers", "flashinfer")
PATH_FIELDS = ("deep_gemm_include_dir",)  # may differ: handled by the install
VLLM_FIELDS = ("vllm", "vllm_config_hash")  # checked where the bundle has them (a vLLM start-up's)


def _driver_major() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    for word in text.split():
        if word[:1].isdigit() and "." in word:
            return word.split(".")[0]
    return None


def _module_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return None


def _gpu() -> dict:
    try:
        import torch
    except Exception:  # noqa: BLE001
        return {}
    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=props.name, num_sms=props.multi_processor_count,
                   capability=capability_text(torch.cuda.get_device_capability(0)))
    return out


def current() -> dict:
    """This machine's fingerprint (imports torch to ask the GPU)."""
    deep_gemm = precompile.deep_gemm_fingerprint()  # the precompile manifest's own reading
    fp = dict.fromkeys(FIELDS + PATH_FIELDS)
    fp.update(_gpu(), driver_major=_driver_major(), nvcc=deep_gemm_rekey.nvcc_version(),
              triton=_module_version("triton"), flashinfer=_module_version("flashinfer-python"),
              vllm=_module_version("vllm"))
    if deep_gemm is not None:
        fp.update(deep_gemm_version=deep_gemm["version"], deep_gemm_include_dir=deep_gemm["include_dir"],
                  deep_gemm_headers=deep_gemm["headers"])
    return fp


def measure() -> dict:
    """current() in a fresh interpreter (this process keeps free of torch)."""
    out = subprocess.run([sys.executable, "-m", "executor.bundle.environment"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": _pythonpath()})
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring the environment failed (exit {out.returncode}): {last}")
    return json.loads(out.stdout)


def _pythonpath() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def device_problem(fp: dict) -> str | None:
    """Why a fingerprint's machine cannot run a warmup on a GPU (None: it has a CUDA device)."""
    if fp.get("torch") is None:
        return "torch is not installed"
    if fp.get("gpu") is None:
        return "torch.cuda.is_available() is False"
    return None


def mismatch(built: dict, here: dict) -> str | None:
    """'FIELD: bundle X, here Y' for the first field that differs (None: compatible). vLLM's
    version is checked where the bundle names one; the config hash where both sides know it (the
    plugin reads it from the live config; `warmup bundle install --vllm-config-hash`)."""
    for field in FIELDS:
        if built.get(field) != here.get(field):
            return f"{field}: bundle {built.get(field)!r}, here {here.get(field)!r}"
    for field in VLLM_FIELDS:
        known = field != "vllm_config_hash" or here.get(field) is not None
        if built.get(field) is not None and known and built.get(field) != here.get(field):
            return f"{field}: bundle {built.get(field)!r}, here {here.get(field)!r}"
    return None


if __name__ == "__main__":
    print(json.dumps(current(), sort_keys=True))
