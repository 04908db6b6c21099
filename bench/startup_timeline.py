#!/usr/bin/env python3
"""One vLLM start's timeline from the plugin's files, or two starts side by side, phase by phase.

    python3 bench/startup_timeline.py A_DIR [B_DIR] [--json OUT]

Each process of a start the plugin was loaded in (the API server, the engine core, each worker)
wrote DIR/timeline.<role>.<pid>.json (vllm_bridge/timeline.py: WARMUP_TIMELINE, else the plan
report's directory). This merges a directory's files of one start (the newest, where it holds
several) onto one clock, seconds from the first process's start, and prints one row per phase per
process: start, end, wall, whose work it is (vLLM's or the plugin's own) and, for vLLM's phases,
the plugin's share: the time the plugin's own marks of that process (not those beside vLLM's
start: a thread, another process) cover inside it. With B_DIR, each phase of A beside the same
phase of B (same process role, same name, same occurrence) and the differences: B's wall minus A's,
and B's end minus A's (how much later B reached the end of it). --json writes the rows.

Standard library only; tested on synthetic files (tests/vllm_bridge/test_vllm_timeline.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

FORMAT = "warmup-timeline/1"


def load_start(path: str) -> dict:
    """The processes of one start: a directory's timeline files (its newest start where it holds
    several) or one file; {"start_id", "t0", "processes": [documents, by process start]}."""
    paths = sorted(glob.glob(os.path.join(path, "timeline.*.json"))) if os.path.isdir(path) else [path]
    docs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("format") == FORMAT:
            docs.append(doc)
    if not docs:
        raise SystemExit(f"{path}: no start-up timeline (timeline.*.json, {FORMAT}) in it")
    starts: dict = {}
    for doc in docs:
        starts.setdefault(doc["start_id"], []).append(doc)
    start_id = max(starts, key=lambda s: (min(begun(d) for d in starts[s]), s))  # the newest start
    processes = sorted(starts[start_id], key=lambda d: (begun(d), d["pid"]))
    return {"start_id": start_id, "t0": begun(processes[0]), "processes": processes}


def begun(doc: dict) -> float:
    """A process's start: /proc's, else its first mark."""
    if doc.get("process_start") is not None:
        return doc["process_start"]
    return min((m["start"] for m in doc["marks"]), default=0.0)


def covered(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] inside the union of the intervals (nested ones count once)."""
    total, reach = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= max(a, reach):  # outside [lo, hi], or inside what is counted already
            continue
        total += b - max(a, reach)
        reach = b
    return total


def rows(start: dict) -> list[dict]:
    """One row per mark of every process, on the start's clock (seconds from t0)."""
    out = []
    t0 = start["t0"]
    for doc in start["processes"]:
        marks = sorted(doc["marks"], key=lambda m: (m["start"], -m["end"]))
        own = [(m["start"], m["end"]) for m in marks if m["owner"] == "plugin" and not m.get("background")]
        seen: dict = {}
        for m in marks:
            n = seen[m["phase"]] = seen.get(m["phase"], 0) + 1
            share = m["end"] - m["start"] if m["owner"] == "plugin" else covered(own, m["start"], m["end"])
            out.append({"process": doc["role"], "pid": doc["pid"], "phase": m["phase"], "n": n, "owner": m["owner"],
                        "background": bool(m.get("background")), "start": round(m["start"] - t0, 3),
                        "end": round(m["end"] - t0, 3), "wall_s": round(m["end"] - m["start"], 3),
                        "plugin_s": round(share, 3)})
    return out


def key(row: dict) -> tuple:
    return row["process"], row["phase"], row["n"]


def side_by_side(a: list[dict], b: list[dict]) -> list[dict]:
    """A's rows in A's order, then those only B has in B's; each with both sides and B - A."""
    b_of = {key(r): r for r in b}
    a_keys = {key(r) for r in a}
    out = []
    for row in a + [r for r in b if key(r) not in a_keys]:
        ra, rb = (row if key(row) in a_keys else None), b_of.get(key(row))
        both = ra is not None and rb is not None
        out.append({"process": row["process"], "phase": row["phase"], "n": row["n"], "owner": row["owner"],
                    "a": ra, "b": rb, "d_wall_s": round(rb["wall_s"] - ra["wall_s"], 3) if both else None,
                    "d_end_s": round(rb["end"] - ra["end"], 3) if both else None})
    return out


def label(row: dict) -> str:
    name = row["phase"] + (f" #{row['n']}" if row["n"] > 1 else "")
    return name + (" (beside)" if row.get("background") else "")


def table(start: dict, lines: list[dict]) -> str:
    head = f"{'process':<16} {'phase':<52} {'owner':<6} {'start':>8} {'end':>8} {'wall':>8} {'plugin':>8}"
    out = [describe(start), head]
    for r in lines:
        out.append(f"{r['process']:<16} {label(r):<52} {r['owner']:<6} {r['start']:8.2f} {r['end']:8.2f} "
                   f"{r['wall_s']:8.2f} {r['plugin_s']:8.2f}")
    return "\n".join(out)


def compared(a_start: dict, b_start: dict, lines: list[dict]) -> str:
    def num(value) -> str:
        return f"{value:8.2f}" if value is not None else f"{'-':>8}"

    head = (f"{'process':<16} {'phase':<52} {'owner':<6} {'A start':>8} {'A wall':>8} {'A plug':>8} "
            f"{'B start':>8} {'B wall':>8} {'B plug':>8} {'d wall':>8} {'d end':>8}")
    out = ["A: " + describe(a_start), "B: " + describe(b_start), head]
    for r in lines:
        a, b = r["a"] or {}, r["b"] or {}
        out.append(f"{r['process']:<16} {label(a or b):<52} {r['owner']:<6} {num(a.get('start'))} "
                   f"{num(a.get('wall_s'))} {num(a.get('plugin_s'))} {num(b.get('start'))} {num(b.get('wall_s'))} "
                   f"{num(b.get('plugin_s'))} {num(r['d_wall_s'])} {num(r['d_end_s'])}")
    return "\n".join(out)


def describe(start: dict) -> str:
    procs = ", ".join(f"{d['role']} (pid {d['pid']})" for d in start["processes"])
    return f"start {start['start_id']}: {len(start['processes'])} processes: {procs}; seconds from the first's start"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="a directory of timeline.*.json files (one start), or one such file")
    parser.add_argument("b", nargs="?", help="a second start, side by side with the first")
    parser.add_argument("--json", help="write the rows there")
    args = parser.parse_args(argv)
    a_start = load_start(args.a)
    a_rows = rows(a_start)
    if args.b:
        b_start = load_start(args.b)
        result = side_by_side(a_rows, rows(b_start))
        print(compared(a_start, b_start, result))
    else:
        result = a_rows
        print(table(a_start, result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
