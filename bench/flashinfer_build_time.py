"""How long FlashInfer takes to build one JIT module, with and without extra nvcc flags (issue 54).

    python3 bench/flashinfer_build_time.py [--generator MODULE:FUNCTION] [--arch 9.0] [--flags TEXT]...

A cold start's longest pole can be one FlashInfer module (its `sampling` module took 102-105 s on an
H200 in bench/RESULTS.md parts AJ and AK, off vLLM's path but the end of it). nvcc's `--split-compile`
runs a compile unit's optimisation passes in threads; FlashInfer passes FLASHINFER_EXTRA_CUDAFLAGS to
every nvcc it runs. Each variant builds the module once, in a fresh FlashInfer workspace of its own
(FLASHINFER_WORKSPACE_BASE), in a child process (FlashInfer reads its environment at import), one after
the other; the output is one JSON object: the variants' flags, wall seconds, library size and each compile
unit's seconds (ninja's log: which unit is the long pole). Nothing
is loaded (no CUDA context): FlashInfer builds for FLASHINFER_CUDA_ARCH_LIST. Each variant has at most
`--timeout` seconds: past it, the child's whole process group (its ninja and nvcc) is ended, so that no
build outlives its variant and loads the machine under a later measurement (bench/RESULTS.md part AK:
a `timeout` around this script ended it and not the nvcc it had started). `--dry-run` prints the
children's commands.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CHILD = """
import importlib, sys
module, function = sys.argv[1].split(":")
spec = getattr(importlib.import_module(module), function)()
spec.build(verbose=False)
print(getattr(spec, "build_dir", ""))
print(spec.jit_library_path)
"""


def unit_seconds(build_dir: str) -> dict:
    """Each output's build seconds, from ninja's log in the module's build directory (its lines: start
    and end in ms, mtime, output, command hash): which compile unit is the module's long pole."""
    path = os.path.join(build_dir, ".ninja_log") if build_dir else ""
    if not path or not os.path.exists(path):
        return {}
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if line.startswith("#") or len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
                continue
            out[os.path.basename(fields[3])] = round((int(fields[1]) - int(fields[0])) / 1000, 1)
    return out


def build_once(generator: str, arch: str, flags: str, timeout_s: float, dry_run: bool = False) -> dict:
    """One build of the module in a fresh workspace, with `flags` as FLASHINFER_EXTRA_CUDAFLAGS."""
    workspace = tempfile.mkdtemp(prefix="fi-build-time-")
    env = {**os.environ, "FLASHINFER_WORKSPACE_BASE": workspace, "FLASHINFER_CUDA_ARCH_LIST": arch}
    env.pop("FLASHINFER_EXTRA_CUDAFLAGS", None)
    if flags:
        env["FLASHINFER_EXTRA_CUDAFLAGS"] = flags
    command = [sys.executable, "-c", CHILD, generator]
    if dry_run:
        print(f"FLASHINFER_EXTRA_CUDAFLAGS={flags!r} FLASHINFER_WORKSPACE_BASE={workspace} {' '.join(command[:2])} ...")
        shutil.rmtree(workspace, ignore_errors=True)
        return {"flags": flags, "dry_run": True}
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # its own process group: ninja and nvcc end with it
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(child)
        shutil.rmtree(workspace, ignore_errors=True)
        return {"flags": flags, "rc": None, "wall_s": round(time.perf_counter() - started, 1), "library_bytes": None,
                "error": [f"not built within {timeout_s:g} s: ended with its ninja and nvcc"]}
    wall = time.perf_counter() - started
    lines = stdout.strip().splitlines() if child.returncode == 0 else []
    library = lines[-1] if lines else None
    result = {"flags": flags, "rc": child.returncode, "wall_s": round(wall, 1),
              "library_bytes": os.path.getsize(library) if library and os.path.exists(library) else None,
              "units_s": unit_seconds(lines[-2]) if len(lines) >= 2 else {}}
    if child.returncode != 0:
        result["error"] = (stderr or stdout).strip().splitlines()[-1:]
    shutil.rmtree(workspace, ignore_errors=True)
    return result


def _end_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.communicate()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generator", default="flashinfer.jit.sampling:gen_sampling_module",
                   help="FlashInfer's 'module:function' that returns the module's JitSpec")
    p.add_argument("--arch", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST for the builds")
    p.add_argument("--flags", action="append", default=None,
                   help="extra nvcc flags of one variant, as --flags=TEXT (repeat; --flags= is FlashInfer's own); "
                        "default: FlashInfer's own and --split-compile=0")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds each variant may build (default 300)")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    variants = args.flags if args.flags is not None else ["", "--split-compile=0"]
    results = []
    for flags in variants:
        results.append(build_once(args.generator, args.arch, flags, args.timeout, args.dry_run))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # each as it ends: a call may stop midway
    print(json.dumps({"generator": args.generator, "arch": args.arch, "cpus": os.cpu_count(), "variants": results}))
    return 0 if all(r.get("rc", 0) == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
