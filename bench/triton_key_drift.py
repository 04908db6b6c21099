#!/usr/bin/env python3
"""Which part of Triton's disk-cache key moved between two starts on one cache directory.

    python3 bench/triton_key_drift.py COLD_REPORT WARM_REPORT

A warm start sometimes compiles every @triton.jit kernel again in the directory where the cold start
before it wrote them and the next warm start loads them (bench/RESULTS.md parts AN and AO). Triton's
key is its own build, the kernel's source, the backend, the options and an environment list
(triton/runtime/cache.py, get_cache_key). The plugin's reports (WARMUP_PLAN_REPORT, one per rank) keep
the process's parts (environment.triton_key_parts, environment.triton_cache_env) and, for each
@triton.jit kernel compiled rather than loaded, its key and the digest of its own part
(jit_monitor.details.triton.compiled_keys: executor/caches/triton.py). This sets the two reports side
by side: first the process's parts, then, for each kernel the second compiled, what the first had of
the same kernel:

  same key       the first wrote this very key: the second did not find its entry on disk
  source moved   no entry of the first has this kernel's own part: its source, a dependency's, the
                 specialization or a constexpr differ
  options moved  an entry of the first has the same own part under another key, and the process's
                 parts and the environment are the same: what is left is the compile options
  process moved  the same own part under another key, and a process part or the environment differs
                 ("options or process moved" where a report lacks a process part)
  not in first   the first compiled no kernel of that name (it loaded it, or never ran it)
  own part unknown  a kernel compiled from IR, whose own part the report could not take

Standard library only; tested on synthetic reports (tests/bench/test_triton_key_drift.py).
"""

from __future__ import annotations

import argparse
import json
import sys


def load(path: str) -> dict:
    """A report's Triton key parts: {"process": {...}, "env": {...} | None, "compiled": [entries]}."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    environment = report.get("environment") or {}
    details = ((report.get("jit_monitor") or {}).get("details") or {}).get("triton") or {}
    return {"process": environment.get("triton_key_parts") or {},
            "env": environment.get("triton_cache_env"),
            "compiled": details.get("compiled_keys") or []}


def process_rows(first: dict, second: dict) -> list[tuple[str, str, object, object]]:
    """(part, same|differs|unknown, first's, second's) for Triton's build, the backend, the environment."""
    rows = []
    for part in ("triton_key", "backend"):
        rows.append(_row(part, first["process"].get(part), second["process"].get(part)))
    rows.append(_row("environment", first["env"], second["env"]))
    return rows


def _row(part: str, a, b) -> tuple[str, str, object, object]:
    verdict = "unknown" if a is None or b is None else ("same" if a == b else "differs")
    return part, verdict, a, b


def kernel_verdicts(first: dict, second: dict) -> list[tuple[str, str, str | None]]:
    """(kernel, verdict, its key in the second) for each compile the second start recorded."""
    verdicts = {verdict for _, verdict, _, _ in process_rows(first, second)}
    process = "differs" if "differs" in verdicts else ("unknown" if "unknown" in verdicts else "same")
    out = []
    for entry in second["compiled"]:
        name = entry.get("kernel")
        same_name = [e for e in first["compiled"] if e.get("kernel") == name]
        out.append((name, _verdict(entry, same_name, process), entry.get("key")))
    return out


def _verdict(entry: dict, same_name: list[dict], process: str) -> str:
    if not same_name:
        return "not in first"
    if any(e.get("key") == entry.get("key") for e in same_name):
        return "same key"
    source = entry.get("source")
    if source is None:
        return "own part unknown"
    same_source = [e for e in same_name if e.get("source") == source]
    if not same_source:
        return "source moved"
    if process == "differs" or all(e.get("env") != entry.get("env") for e in same_source):
        return "process moved"
    return "options moved" if process == "same" else "options or process moved"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", help="the earlier start's plan report (the cold start that wrote the kernels)")
    parser.add_argument("second", help="the later start's plan report (the warm start that compiled again)")
    args = parser.parse_args(argv)
    try:
        first, second = load(args.first), load(args.second)
    except (OSError, ValueError) as e:
        print(f"triton_key_drift: {e}", file=sys.stderr)
        return 2
    print("process part   verdict   first -> second")
    for part, verdict, a, b in process_rows(first, second):
        print(f"{part:<14} {verdict:<9} {a} -> {b}")
    for name, doc in (("first", first), ("second", second)):
        if not doc["process"] and not doc["compiled"]:
            print(f"the {name} report keeps no Triton key parts (a plugin older than these records, or no Triton)")
    verdicts = kernel_verdicts(first, second)
    print(f"\n{len(verdicts)} @triton.jit kernels compiled by the second start")
    for name, verdict, key in verdicts:
        print(f"{verdict:<14} {name} {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
