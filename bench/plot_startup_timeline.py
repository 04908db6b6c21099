#!/usr/bin/env python3
"""Draw the start-up timeline of vLLM runs (bench/vllm_plugin_trace.py's result.json, or
bench/vllm_serve_trace.py's in server mode) as one PNG.

    python3 bench/plot_startup_timeline.py RUNS/stock-cold/result.json RUNS/plugin-cold/result.json -o timeline.png
    python3 bench/plot_startup_timeline.py TIMELINE_DIR_A TIMELINE_DIR_B -o timeline.png

A directory (or a timeline.<role>.<pid>.json file) is the plugin's start-up timeline of one start
(vllm_bridge/timeline.py, merged by bench/startup_timeline.py): one run per process (API server,
engine core, workers), all on the clock of the start's first process, one bar per phase.

One time axis, in seconds from each run's process start; per run a group of rows with its phases
as coloured bars (the outer phases on top, what runs inside them on the rows below, by nesting:
engine start, weights,
memory profile with its profile run and torch.compile, DeepGEMM, CUDA graphs, synthetic batches,
the plugin's plan with its stages), a dashed line at ready, and for a plugin run one lane per
precompile worker process (pid) with its jobs. Bars marked "derived" in result.json (the plan's
stages laid end to end from the report's walls) are hatched. --until ready stops the axis at the
last ready line (default: the whole trace too). Server-mode runs: their phases are read from the
server's log lines (each stamped with its arrival), ready is the first 200 from /health, and each
kernel vLLM's JIT monitor reported after ready is a red dotted line.

Needs matplotlib, which is not a dependency of this project (nor installed in CI): here
`python3 -m pip install matplotlib`. The layout (which bar goes on which row, in which colour) is
`layout()`, plain Python, tested without matplotlib (tests/bench/test_vllm_startup_bench.py).
"""

from __future__ import annotations

import argparse
import json
import os

# (category, colour) of a phase name; the first prefix that matches wins.
CATEGORIES = [
    ("LLM() to ready (the whole engine start)", "#e4e4e4", ("LLM() to ready",)),
    ("start to ready (the whole server start)", "#e4e4e4", ("start to ready",)),
    ("engine start (imports, device, API server)", "#9e9e9e",
     ("import vllm", "import vLLM worker", "init device", "engine start", "API server", "process start",
      "engine config")),
    ("init engine (profile, KV cache, warmup)", "#f2f2f2", ("init engine",)),
    ("weights", "#8c564b", ("weights", "load_model", "Worker.load_model")),
    ("torch.compile", "#9467bd", ("torch.compile",)),
    ("profile run / memory profile", "#ff7f0e", ("profile run", "memory profile", "Worker.determine_available_memory")),
    ("DeepGEMM", "#d62728", ("DeepGEMM warmup", "plan: deep_gemm")),
    ("CUDA graphs", "#2ca02c", ("CUDA graphs", "plan: cudagraph")),
    ("synthetic batches", "#1f77b4", ("synthetic batches", "plan: warmup_kernels")),
    ("plugin plan / pool", "#17becf", ("plugin", "precompile", "plan:", "generic Triton variants")),
    ("kernel_warmup / FlashInfer autotune", "#e377c2", ("kernel_warmup", "FlashInfer autotune")),
    ("FlashInfer modules built ahead", "#f7b6d2", ("FlashInfer's modules built ahead",)),
    ("compile_or_warm_up_model", "#bcbd22", ("compile_or_warm_up_model", "Worker.compile_or_warm_up_model",
                                             "warmup (", "warmup before", "warmup after")),
    ("KV cache allocation", "#7f7f7f", ("KV cache allocation",)),
    ("requests after ready", "#c7c7c7", ("first request", "batch ", "trace", "HTTP requests")),
]
OTHER = ("other", "#dddddd")
JOB_COLOURS = {"deep_gemm": "#d62728", "deep_gemm_vllm": "#d62728", "triton": "#9467bd"}
DARK = ("#8c564b", "#9467bd", "#d62728", "#1f77b4", "#7f7f7f", "#2ca02c")  # white text on these


def category(name: str) -> tuple[str, str]:
    for label, colour, prefixes in CATEGORIES:
        if name.startswith(prefixes):
            return label, colour
    return OTHER


def depths(phases: list[dict]) -> list[int]:
    """Each phase's nesting depth: how many other phases of the run contain it (a longer one, or an
    equal one listed earlier). The worker's methods sit inside LLM(), vLLM's profile run inside the
    memory profile, torch.compile inside the profile run, and so on, whatever the release calls."""
    out = []
    for i, p in enumerate(phases):
        n = 0
        for j, q in enumerate(phases):
            if i == j or not (q["start"] <= p["start"] and p["end"] <= q["end"]):
                continue
            longer = (q["end"] - q["start"]) > (p["end"] - p["start"])
            if longer or j < i:
                n += 1
        out.append(n)
    return out


def run_label(result: dict, path: str) -> str:
    return f"{result.get('arm', '?')} ({os.path.basename(os.path.dirname(os.path.abspath(path))) or '?'})"


def layout(runs: list[tuple[str, dict]]) -> dict:
    """Rows and bars of the figure, from (label, result) pairs; no matplotlib.

    Returns {"rows": [{"label", "run"}], "bars": [{"row", "start", "end", "name", "category",
    "colour", "derived"}], "marks": [{"row_first", "row_last", "at", "what"}], "end": max x}; times in
    seconds from each run's process start. Per run: a row per nesting depth (depths()), a row for
    the derived plan stages, a row per precompile worker. The "trace" phase is left out (its
    batches show)."""
    rows, bars, marks, end = [], [], [], 0.0
    for label, result in runs:
        t0 = result.get("process_start") or result.get("script_start") or 0.0
        phases = [p for p in result.get("phases") or [] if p.get("name") != "trace"]
        timed = [p for p in phases if not p.get("derived")]
        derived = [p for p in phases if p.get("derived")]
        placed = list(zip(timed, depths(timed)))
        first = len(rows)
        row_of = {}
        for depth in sorted({d for _, d in placed}):
            row_of[depth] = len(rows)
            rows.append({"label": label if depth == 0 else f"{label}: level {depth}", "run": label})
        if derived:  # the plan's stages from the report's walls: a row of their own
            row_of["derived"] = len(rows)
            rows.append({"label": f"{label}: plan stages (report)", "run": label})
        for p, key in [(p, d) for p, d in placed] + [(p, "derived") for p in derived]:
            name = p["name"]
            cat, colour = category(name)
            bars.append({"row": row_of[key], "start": p["start"] - t0, "end": p["end"] - t0, "name": name,
                         "category": cat, "colour": colour, "derived": key == "derived"})
            end = max(end, p["end"] - t0)
        for lane in (result.get("plugin") or {}).get("lanes") or []:
            row = len(rows)
            rows.append({"label": f"{label}: precompile pid {lane['pid']}", "run": label})
            for job in lane.get("jobs") or []:
                backend = job.get("backend") or "?"
                bars.append({"row": row, "start": job["start"] - t0, "end": job["end"] - t0,
                             "name": str(job.get("key") or backend), "category": f"precompile job: {backend}",
                             "colour": JOB_COLOURS.get(backend, "#aec7e8"), "derived": False})
                end = max(end, job["end"] - t0)
        last = len(rows) - 1
        if result.get("ready_at"):
            marks.append({"row_first": first, "row_last": last, "at": result["ready_at"] - t0,
                          "what": f"ready {result['ready_at'] - t0:.1f} s"})
        if result.get("first_request_done_at"):
            marks.append({"row_first": first, "row_last": last, "at": result["first_request_done_at"] - t0,
                          "what": "first request done"})
        marks += jit_marks(result, t0, first, last)
    return {"rows": rows, "bars": bars, "marks": marks, "end": end}


def jit_marks(result: dict, t0: float, first: int, last: int) -> list[dict]:
    """Server mode: where vLLM's JIT monitor reported a kernel after ready (its first line each)."""
    monitor, ready = result.get("vllm_jit_monitor") or {}, result.get("ready_at")
    out, seen = [], set()
    for line in monitor.get("lines") or []:
        text = line.get("line", "")
        if not line.get("after_ready") or ready is None or text in seen or len(out) >= 5:
            continue
        seen.add(text)
        out.append({"row_first": first, "row_last": last, "at": ready + line["t_s"] - t0,
                    "what": "JIT after ready: " + text.split("during inference:")[-1][:60]})
    return out


def draw(runs: list[tuple[str, dict]], out: str, title: str | None, until: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lay = layout(runs)
    rows, bars = lay["rows"], lay["bars"]
    readies = [m["at"] for m in lay["marks"] if m["what"].startswith("ready")]
    x_end = (max(readies) * 1.04 if until == "ready" and readies else lay["end"] * 1.02) or 1.0
    height = 1.6 + 0.42 * len(rows)
    fig, ax = plt.subplots(figsize=(16, height), dpi=100)
    draw_bars(ax, bars, x_end)
    draw_marks(ax, lay["marks"], x_end)
    draw_axes(ax, rows, x_end)
    draw_legend(ax, lay, height, Patch, {r.get("mode", "offline") for _, r in runs})
    readies_text = ", ".join(f"{label} ready {r.get('ready_at', 0) - (r.get('process_start') or 0):.1f} s"
                             for label, r in runs if r.get("ready_at"))
    ax.set_title(title or f"vLLM start-up: {readies_text}", fontsize=11)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def draw_bars(ax, bars: list, x_end: float) -> None:
    """Each phase or job as a bar, labelled with its name and seconds where the label fits."""
    px_per_s = 16 * 100 * 0.78 / x_end  # the axes take about 78% of the 1600 px
    for bar in bars:
        if bar["start"] > x_end:
            continue
        width = max(bar["end"] - bar["start"], x_end / 2000)
        ax.barh(bar["row"], width, left=bar["start"], height=0.72, color=bar["colour"],
                edgecolor="#333333" if bar["derived"] else "white", linewidth=0.5,
                hatch="//" if bar["derived"] else None, alpha=0.9 if bar["derived"] else 1.0)
        if bar["category"].startswith("precompile job"):
            continue
        for text in (f"{bar['name']} {bar['end'] - bar['start']:.1f}s", f"{bar['end'] - bar['start']:.1f}s"):
            if width * px_per_s > 4.7 * len(text) + 6:  # the longest label that fits in the bar
                ax.text(bar["start"] + width / 2, bar["row"], text, ha="center", va="center", fontsize=7.5,
                        clip_on=True, color="white" if bar["colour"] in DARK else "black")
                break


def draw_marks(ax, marks: list, x_end: float) -> None:
    """Ready (dashed, labelled), the first request done (dotted) and, in server mode, the JIT
    monitor's kernels after ready (red, dotted) per run."""
    for mark in marks:
        if mark["at"] > x_end:
            continue
        ready = mark["what"].startswith("ready")
        ax.vlines(mark["at"], mark["row_first"] - 0.45, mark["row_last"] + 0.45,
                  colors="#d62728" if mark["what"].startswith("JIT") else "black",
                  linestyles="--" if ready else ":", linewidth=1.2)
        if ready:  # the first request's line is in the legend, not labelled (it sits next to ready)
            right = mark["at"] > 0.85 * x_end  # near the right edge: the label goes left of the line
            ax.text(mark["at"], mark["row_first"] - 0.5, (mark["what"] + " ") if right else (" " + mark["what"]),
                    fontsize=8.5, va="bottom", ha="right" if right else "left", fontweight="bold")


def draw_axes(ax, rows: list, x_end: float) -> None:
    runs_seen = []
    for i, row in enumerate(rows):  # a thin rule between runs
        if row["run"] not in runs_seen:
            runs_seen.append(row["run"])
            if i:
                ax.axhline(i - 0.5, color="#444444", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=8.5)
    ax.set_ylim(len(rows) - 0.4, -0.9)
    ax.set_xlim(0, x_end)
    ax.set_xlabel("seconds since the process started")
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)


def draw_legend(ax, lay: dict, height: float, Patch, modes: set) -> None:
    bars = lay["bars"]
    seen, handles = set(), []
    for bar in bars:
        if bar["category"] not in seen:
            seen.add(bar["category"])
            handles.append(Patch(facecolor=bar["colour"], label=bar["category"]))
    from matplotlib.lines import Line2D

    ready = {"offline": "LLM() returned", "server": "first 200 from /health"}
    handles.append(Line2D([], [], color="black", linestyle="--",
                          label=f"ready ({'; '.join(ready.get(m, m) for m in sorted(modes))})"))
    if any(m["what"] == "first request done" for m in lay["marks"]):
        handles.append(Line2D([], [], color="black", linestyle=":", label="first request done"))
    if any(m["what"].startswith("JIT") for m in lay["marks"]):
        handles.append(Line2D([], [], color="#d62728", linestyle=":", label="vLLM's JIT monitor after ready"))
    if any(b["derived"] for b in bars):
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="//", label="from the plugin's report walls"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.9 / max(height, 1) - 0.04),
              ncol=min(6, len(handles)), fontsize=8, frameon=False)


def timeline_runs(path: str) -> list[tuple[str, dict]]:
    """One start's timeline (bench/startup_timeline.py reads it) as runs of layout(): one per
    process, each on the start's clock (the first process's start), its ready where it has one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("startup_timeline", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "startup_timeline.py"))
    merge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(merge)
    start = merge.load_start(path)
    name = os.path.basename(os.path.abspath(path if os.path.isdir(path) else os.path.dirname(path)))
    runs = []
    for doc in start["processes"]:
        marks = doc["marks"]
        result = {"arm": doc["role"], "process_start": start["t0"],
                  "phases": [{"name": m["phase"], "start": m["start"], "end": m["end"]}
                             for m in marks if m["end"] > m["start"]]}
        ready = [m["start"] for m in marks if m["phase"] == "ready"]
        if ready:
            result["ready_at"] = ready[-1]
        runs.append((f"{name}: {doc['role']} ({doc['pid']})", result))
    return runs


def is_timeline(path: str) -> bool:
    return os.path.isdir(path) or os.path.basename(path).startswith("timeline.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="result.json files (e.g. stock-cold's, then plugin-cold's), "
                        "or the plugin's timeline directories")
    parser.add_argument("-o", "--out", default="startup_timeline.png")
    parser.add_argument("--title")
    parser.add_argument("--until", choices=("all", "ready"), default="all")
    args = parser.parse_args()
    runs = []
    for path in args.results:
        if is_timeline(path):
            runs += timeline_runs(path)
            continue
        with open(path) as f:
            result = json.load(f)
        runs.append((run_label(result, path), result))
    draw(runs, args.out, args.title, args.until)
    print(args.out)


if __name__ == "__main__":
    main()
