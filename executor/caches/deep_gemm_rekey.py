"""Re-key DeepGEMM 2.5/2.6 cache entries for another install path.

Facts (DeepGEMM 2.5.0 and 2.6.1, csrc/jit/compiler.hpp and csrc/utils/hash.hpp, reproduced
here from their description, not their code): an entry is ``cache/kernel.<name>.<hash>/`` where
``hash = digest(name + "$$" + signature + "$$" + flags + "$$" + code)``; ``code`` is the entry's
``kernel.cu`` byte for byte; ``signature`` is ``NVCC<major>.<minor>``; with NVCC (the default)
``flags`` is ``BASE -I<include dir> --gpu-architecture=sm_<arch> NVCC_TAIL``, BASE holding the
C++ standard (DG_JIT_CPP_STANDARD, 20) and the optional verbose-PTXAS and line-info flags.
``digest`` runs FNV-1a (64-bit, prime 0x100000001b3) over the bytes from two seeds and prints
each state through the split-mix-64 finalizer as 16 hex digits. The include directory is the
package's ``include/``: moving DeepGEMM moves every key. 2.8 keys on header content instead
(executor.caches.deep_gemm_install), so its entries need no re-keying.

A bundle records, per entry, the context that reproduces its hash here (``find_context``
tries the few flag combinations DeepGEMM can produce and keeps the one whose digest equals the
directory's hash); an install at another path recomputes the hash with the new include
directory. An entry whose hash cannot be reproduced is not re-keyed: the install refuses it.
NVRTC builds (DG_JIT_USE_NVRTC) add the CUDA include path and are not reproduced.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from typing import NamedTuple

from kernel_model.device import parse_capability

_SEEDS = (0xC6A4A7935BD1E995, 0x9E3779B97F4A7C15)
_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
DIAG = "--diag-suppress=39,161,174,177,186,940 --ptxas-options=--register-usage-level=10"
VERBOSE = " --ptxas-options=--verbose,--warn-on-local-memory-usage"
LINEINFO = " -Xcompiler -rdynamic -lineinfo"
NVCC_TAIL = (" --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi -O3 "
             "--expt-relaxed-constexpr --expt-extended-lambda")


def _split_mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def legacy_digest(data: bytes) -> str:
    """The 32-hex-digit digest DeepGEMM 2.5/2.6 names a cache entry with."""
    out = ""
    for seed in _SEEDS:
        h = seed
        for byte in data:
            h = ((h ^ byte) * _PRIME) & _MASK
        out += f"{_split_mix(h):016x}"
    return out


class LegacyContext(NamedTuple):
    """What, beside the name, code and include directory, a 2.5/2.6 key was made of."""

    signature: str   # NVCC13.0
    base: str        # -std=c++20 --diag-suppress=... [verbose] [line info]
    arch: str        # 90a

    def key(self, name: str, code: bytes, include_dir: str) -> str:
        flags = f"{self.base} -I{include_dir} --gpu-architecture=sm_{self.arch}{NVCC_TAIL}"
        head = f"{name}$${self.signature}$${flags}$$".encode()
        return legacy_digest(head + code)


def candidates(nvcc: str, arch: str, cpp_std: int = 20) -> list[LegacyContext]:
    """Every context DeepGEMM 2.5/2.6 can build with this NVCC and GPU (debug flags on or off)."""
    out = []
    for verbose, lineinfo in itertools.product(("", VERBOSE), ("", LINEINFO)):
        out.append(LegacyContext(f"NVCC{nvcc}", f"-std=c++{cpp_std} {DIAG}{verbose}{lineinfo}", arch))
    return out


def find_context(name: str, digest: str, code: bytes, include_dir: str,
                 contexts: list[LegacyContext]) -> LegacyContext | None:
    """The context whose key for this entry is its directory's hash (None: not reproducible)."""
    for context in contexts:
        if context.key(name, code, include_dir) == digest:
            return context
    return None


def arch_of(capability: str) -> str:
    """DeepGEMM's arch string for a compute capability '9.0' -> '90a' (2.5/2.6 device_runtime)."""
    major, minor = parse_capability(capability)
    if major == 10 and minor != 1:
        return "100a"
    return f"{major}{minor}a"


def nvcc_path(env=os.environ) -> str:
    """The NVCC DeepGEMM runs: DG_JIT_NVCC_COMPILER, else CUDA_HOME/CUDA_PATH/bin/nvcc, else /usr/local/cuda."""
    if env.get("DG_JIT_NVCC_COMPILER"):
        return env["DG_JIT_NVCC_COMPILER"]
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not home:
        which = subprocess.run(["which", "nvcc"], capture_output=True, text=True)
        found = which.stdout.strip()
        home = os.path.dirname(os.path.dirname(found)) if which.returncode == 0 and found else "/usr/local/cuda"
    return os.path.join(home, "bin", "nvcc")


def nvcc_version(env=os.environ) -> str | None:
    """'13.0' from ``nvcc --version`` (None without an NVCC)."""
    try:
        out = subprocess.run([nvcc_path(env), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None
