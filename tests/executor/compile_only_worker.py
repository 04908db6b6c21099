"""Run a plan's precompile jobs the way a pool worker does, on a machine without a GPU.

A fresh process (no TRITON_INTERPRET): the worker initializer with the offline target
cuda:90 (as when NVML reports an H100), then every job of ``compile_jobs`` through
``run_job``: Triton's real compiler, no torch, no CUDA. Launchers are C modules linked
against libcuda, which a machine without a GPU lacks: their builds are recorded instead.
Prints one JSON line: per job its status, compiles seen by the worker's JIT monitor and
launchers built; then whether torch was imported.

    python3 compile_only_worker.py PLAN ENGINE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import executor.worker_preload  # noqa: E402,F401 - what the pool's fork server imports first
from executor import precompile, run  # noqa: E402
from executor.context import Options  # noqa: E402
from executor.kernels.jit import stand_in  # noqa: E402
from executor.precompile.workers import worker  # noqa: E402
from executor.precompile.workers.backend_classes import WORKER_CLASSES  # noqa: E402
from executor.precompile.workers.setup import worker_setup  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402

LAUNCHERS: list[str] = []


def main(plan_name: str, engine_name: str) -> None:
    engine = load_engine(engine_name)
    steps = expand(load_plan(plan_name), engine).steps
    options = run.with_engine_tables(Options(), engine.facts)  # the engine's tuned tables, by argument
    jobs = precompile.compile_jobs(steps)
    specs = {"triton": WORKER_CLASSES["triton"]}
    worker.init_worker(specs, "cuda", "warn", options, {"env": worker_setup("cpu")["env"], "capability": 90})
    stand_in.build_launcher = lambda compiled: LAUNCHERS.append(compiled.hash)
    records = []
    for job in jobs:
        before = len(LAUNCHERS)
        out = worker.run_job(job)
        records.append({"kind": job.kind, "key": job.key, "status": out.status, "error": out.error,
                        "compiled": out.compiled, "launchers": len(LAUNCHERS) - before})
    state = worker._WORKER
    print(json.dumps({"jobs": records, "target": state["target"], "errors": state["errors"],
                      "torch": "torch" in sys.modules}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
