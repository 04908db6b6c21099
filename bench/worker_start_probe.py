"""Where a precompile worker's start-up and first job go (issue 9): one JSON line per probe.

Each probe runs in fresh processes with its own empty TRITON_CACHE_DIR:

  import_*        seconds to import triton / torch / both / the executor's kernels / what the
                  precompile pool's fork server imports (executor/worker_preload.py)
  cuda_utils      Triton's CUDA utils module built with gcc (an empty cache), no CUDA call
  cuinit_1/16     torch.cuda.init() in 1, then 16 processes at once (each its own wall)
  compile_only    an fp8_gemm variant compiled for a fixed sm_90 target with no CUDA at all
  launcher        the gcc build of that variant's launcher (Triton's per-signature C module)

    python3 bench/worker_start_probe.py > probe.jsonl
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TIMED = """
import time, json, os, sys
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
{body}
print(json.dumps({{"s": round(time.perf_counter() - t0, 3), **locals().get("extra", {{}})}}))
"""

BODIES = {
    "import_triton": "import triton",
    "import_torch": "import torch",
    "import_torch_triton": "import torch, triton",
    "import_kernels": "import executor.kernels.fp8_gemm, executor.runner.kernels",
    "import_worker": "import executor.worker_preload\nextra = {'torch': 'torch' in sys.modules}",
    "cuda_utils": "from triton.backends.nvidia.driver import CudaUtils\nCudaUtils()",
    "cuinit": "import torch\nt1 = time.perf_counter()\ntorch.cuda.init()\nextra = {'init_s': round(time.perf_counter() - t1, 3)}",
    "compile_only": """
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
class Offline:
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", 90, 32)
import torch
from executor.kernels import fp8_gemm as g
driver.set_active(Offline())
t1 = time.perf_counter()
inputs = g.alloc_gemm_inputs(64, 4096, 4096, "cpu")
k = g.precompile(64, 4096, 4096, "cpu", inputs)
t2 = time.perf_counter()
from triton.backends.nvidia.driver import CudaLauncher
CudaLauncher(k.src, k.metadata)
extra = {'compile_s': round(t2 - t1, 3), 'launcher_s': round(time.perf_counter() - t2, 3)}
""",
}


def run(name: str, n: int = 1) -> list[dict]:
    body = BODIES[name]
    procs = []
    for _ in range(n):
        env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="probe-"))
        env.pop("TRITON_INTERPRET", None)
        procs.append(subprocess.Popen([sys.executable, "-c", TIMED.format(root=ROOT, body=body)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        out.append(json.loads(lines[-1]) if lines else {"error": stderr.strip().splitlines()[-1:] or "?"})
    return out


def main() -> None:
    t0 = time.perf_counter()
    for name, n in (("import_torch_triton", 1), ("import_triton", 1), ("import_torch", 1), ("import_kernels", 1), ("import_worker", 1),
                    ("cuda_utils", 1), ("cuinit", 1), ("cuinit", 16), ("compile_only", 1), ("compile_only", 16)):
        began = time.perf_counter()
        results = run(name, n)
        print(json.dumps({"probe": name, "processes": n, "wall_s": round(time.perf_counter() - began, 3),
                          "results": results}), flush=True)
    print(json.dumps({"probe": "total", "wall_s": round(time.perf_counter() - t0, 3)}), flush=True)


if __name__ == "__main__":
    main()
