"""The execution report: every step's status with its id, per-stage totals, the JIT monitor's
counts, the precompile phase (--jobs: worker processes, per-job records, the speed-up),
the hot-path check, the serving trace (--verify-trace), and the environment. Written
as JSON, atomically, always: also when a step fails, when the run crashes, and on Ctrl-C
(exit 130).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from planner.output import write_atomic
from planner.words import count

from kernel_model.deep_gemm import CHECKED_VERSIONS
from kernel_model.device import capability_text

from . import registry
from .caches import deep_gemm_install
from .caches import triton as triton_cache
from .records import STATUSES, StepRecord

FORMAT = "warmup-execute-report/v1"
EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Report:
    def __init__(self, expanded=None, options: dict | None = None):
        self.started = time.time()
        self.finished: float | None = None
        self.plan = expanded.plan if expanded else None
        self.engine = expanded.engine if expanded else None
        self.digest = expanded.digest if expanded else None
        self.options = options or {}
        self.steps: list[dict] = []
        self.stage_order: list[str] = []
        self.stage_wall: dict[str, float] = {}
        self.monitor: dict | None = None
        self.verify: dict | None = None
        self.verify_trace: dict | None = None  # executor.verify.trace_check
        self.precompile: dict | None = None    # executor.precompile.Precompiler.summary()
        self.startup: dict | None = None       # executor.run.start_up: imports and CUDA context
        self.host: dict | None = None          # what a serving engine that ran the plan adds (vllm_bridge)
        self.environment: dict = {}
        self.interrupted = False
        self.error: str | None = None        # invalid input or internal error, one line
        self.error_kind: str | None = None   # "invalid" | "internal"
        self.source: dict = {}
        self.allow_missing = bool(self.options.get("allow_missing"))

    # --- filling in ------------------------------------------------------------------------

    def add_step(self, record: StepRecord) -> None:
        if record.stage not in self.stage_order:
            self.stage_order.append(record.stage)
        self.steps.append(record)

    def stage_summary(self, stage: str) -> dict:
        recs = [r for r in self.steps if r.stage == stage]
        out = {"stage": stage, "steps": len(recs)}
        for status in STATUSES:
            out[status] = sum(r.status == status for r in recs)
        out["run"] = out["ok"] + out["failed"]
        out["kernel_calls"] = sum(r.kernel_calls or 0 for r in recs)
        jits = [r.jit for r in recs if r.jit is not None]
        # None (shown as "-") when the JIT monitor was off: nothing was counted. A variant is a
        # Triton kernel or a DeepGEMM one: both count as compiled, and as loaded from disk.
        main = sum(j["compiled"] + j.get("deep_gemm_jit", 0) for j in jits) if jits else None
        pres = [r.precompile["compiled"] for r in recs
                if r.precompile and r.precompile.get("compiled") is not None]
        pool = sum(pres) if pres else None
        # compiled: the main process's compiles plus the workers' for the keys this stage reaches
        # first (--jobs); disk_loads: the main process's loads from the disk cache.
        out["compiled"] = None if main is None and pool is None else (main or 0) + (pool or 0)
        out["compiled_main"] = main
        out["compiled_pool"] = pool
        out["disk_loads"] = sum(j["disk_loads"] + (j.get("deep_gemm_loads") or 0) for j in jits) if jits else None
        out.update(_deep_gemm_counts(recs, jits))
        out["wall_s"] = round(self.stage_wall.get(stage, sum(r.wall_s for r in recs)), 3)
        return out

    def stages(self) -> list[dict]:
        return [self.stage_summary(s) for s in self.stage_order]

    def counts(self) -> dict:
        return {s: sum(r.status == s for r in self.steps) for s in STATUSES}

    def post_seal_compiles(self) -> int:
        return len((self.monitor or {}).get("post_seal_events") or [])

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.error_kind == "invalid":
            return EXIT_INVALID
        if self.error_kind == "internal":
            return EXIT_INTERNAL
        counts = self.counts()
        if counts["failed"] or (counts["unavailable"] and not self.allow_missing):
            return EXIT_FAILED
        if self.verify and (self.verify.get("post_seal_compiles") or self.verify.get("failures")):
            return EXIT_FAILED
        if self.verify_trace and (self.verify_trace.get("compiles") or self.verify_trace.get("error")):
            return EXIT_FAILED
        return EXIT_OK

    def status(self) -> str:
        code = self.exit_code()
        return {EXIT_OK: "ok", EXIT_FAILED: "failed", EXIT_INVALID: "invalid input",
                EXIT_INTERNAL: "internal error", EXIT_INTERRUPTED: "interrupted"}[code]

    def to_dict(self) -> dict:
        finished = self.finished or time.time()
        return {
            "format": FORMAT,
            "status": self.status(),
            "exit_code": self.exit_code(),
            "error": self.error,
            "interrupted": self.interrupted,
            "plan": self.plan, "engine": self.engine, "digest": self.digest, "source": self.source,
            "started": _iso(self.started), "finished": _iso(finished),
            "wall_s": round(finished - self.started, 3),
            "options": self.options,
            "environment": self.environment,
            "counts": self.counts(),
            "stages": self.stages(),
            "steps": [r.to_dict() for r in self.steps],
            "jit_monitor": self.monitor,
            "verify": self.verify,
            "verify_trace": self.verify_trace,
            "startup": self.startup,
            "precompile": self.precompile,
            **({"host": self.host} if self.host is not None else {}),
        }

    # --- output ----------------------------------------------------------------------------------

    def write(self, path: str) -> None:
        """Atomic: a reader sees the previous report or this one, never part of one."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str) + "\n"
        write_atomic(path, text)

    def render_summary(self) -> str:
        pool = bool(self.precompile and self.precompile.get("jobs"))  # a "pool" column: compiled by workers
        rows = [("stage", "steps", "run", "ok", "failed", "unavail", "skipped", "calls", "compiled")
                + (("pool",) if pool else ()) + ("disk", "wall_s")]
        total = {k: 0 for k in ("steps", "run", "ok", "failed", "unavailable", "skipped", "kernel_calls")}
        comp_total = disk_total = pool_total = 0
        monitored = False
        for s in self.stages():
            rows.append((s["stage"], s["steps"], s["run"], s["ok"], s["failed"], s["unavailable"], s["skipped"],
                         s["kernel_calls"], _dash(s["compiled"]))
                        + ((_dash(s.get("compiled_pool")),) if pool else ())
                        + (_dash(s["disk_loads"]), f"{s['wall_s']:.2f}"))
            for k in total:
                total[k] += s[k]
            if s["compiled"] is not None:
                monitored = True
                comp_total += s["compiled"]
                disk_total += s["disk_loads"] or 0
                pool_total += s.get("compiled_pool") or 0
        rows.append(("total", total["steps"], total["run"], total["ok"], total["failed"], total["unavailable"],
                     total["skipped"], total["kernel_calls"], comp_total if monitored else "-")
                    + ((pool_total if monitored else "-",) if pool else ())
                    + (disk_total if monitored else "-", f"{sum(self.stage_wall.values()):.2f}"))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines = []
        for i, r in enumerate(rows):
            cells = [str(c).ljust(widths[j]) if j == 0 else str(c).rjust(widths[j]) for j, c in enumerate(r)]
            lines.append("  ".join(cells).rstrip())
            if i == 0 or i == len(rows) - 2:
                lines.append("  ".join("-" * w for w in widths))
        out = "\n".join(lines) + "\n"
        problems = [r for r in self.steps if r.status in ("failed", "unavailable")]
        for r in problems:
            out += f"{r.status}: {r.id}: {r.error or ''}\n"
        if self.startup and self.startup.get("wall_s", 0) >= 0.05:
            out += (f"startup: {self.startup['wall_s']:.2f} s before the first stage (backends "
                    f"{', '.join(self.startup.get('backends') or {}) or 'none'}"
                    + (f"; CUDA context {self.startup['cuda_init_s']:.2f} s" if "cuda_init_s" in self.startup else "")
                    + ")\n")
        line = render_precompile(self.precompile)
        if line:
            out += line + "\n"
        if self.verify:
            v = self.verify
            out += (f"verify: {v['calls']} random calls over {len(v['keys'])} keys (seed {v['seed']}): "
                    f"{v['post_seal_compiles']} post-seal compiles, {len(v['failures'])} failures, "
                    f"{v['wall_s']:.2f} s\n")
            for e in v.get("events", [])[:20]:
                out += f"  post-seal: {e.get('step')}: {e.get('kernel')} {e.get('repr') or ''}\n"
        if self.verify_trace:
            out += render_trace(self.verify_trace)
        if self.monitor and self.monitor.get("sealed") and not (self.verify or self.verify_trace):
            out += f"jit monitor: sealed, {self.post_seal_compiles()} post-seal compiles\n"
        out += f"status: {self.status()} (exit {self.exit_code()})\n"
        return out


def _deep_gemm_counts(recs: list, jits: list) -> dict:
    """A stage's DeepGEMM kernels compiled (main process + pool) and loaded (None: not counted)."""
    pool = sum((r.precompile or {}).get("deep_gemm_compiled") or 0 for r in recs)
    loads = [j.get("deep_gemm_loads") for j in jits if j.get("deep_gemm_loads") is not None]
    if not any(registry.writes_deep_gemm(r.backend or "") or registry.writes_deep_gemm(r.planned_backend or "")
               for r in recs):
        return {}
    return {"deep_gemm_compiled": (sum(j.get("deep_gemm_jit", 0) for j in jits) + pool) if jits else None,
            "deep_gemm_loaded": sum(loads) if loads else None}


def render_precompile(p: dict | None) -> str:
    """One line for the precompile phase (empty when it was off with nothing to say)."""
    if not p:
        return ""
    if p["status"] == "skipped":
        return f"precompile: skipped: {p['reason']}"
    if not p.get("jobs"):
        return f"precompile: off: {p['reason']}" if p.get("keys_planned") and p.get("jobs_option", 0) > 1 else ""
    n = p["jobs"]
    line = (f"precompile: {count(n, 'variant')} in {count(p['workers'], 'worker')}: {_dash(p.get('compiled'))} compiled, "
            f"{_dash(p.get('disk_loads'))} loaded")
    bad = [f"{p[k]} {k}" for k in ("failed", "unavailable", "cancelled") if p.get(k)]
    if bad:
        line += ", " + ", ".join(bad)
    if p.get("speedup") is not None:
        line += (f"; {p['busy_s']:.2f} s of jobs in {p['wall_s']:.2f} s wall (speed-up {p['speedup']:.1f}x)")
    if p.get("keys_in_manifest"):
        line += f"; {p['keys_in_manifest']} of {p['keys_planned']} keys already cached"
    line += _shared_keys(p.get("claims") or {})
    if p["status"] == "cancelled":
        line += f"; cancelled: {p['reason']}"
    failed = [r for r in p.get("records") or [] if r.get("status") in ("failed", "unavailable")]
    for r in failed[:10]:
        line += f"\n  precompile {r['status']}: {r['step']} {r['key']}: {r.get('error') or ''}"
    if len(failed) > 10:
        line += f"\n  ... and {len(failed) - 10} more (see the report)"
    return line


def _shared_keys(c: dict) -> str:
    """The report line's words on the keys other processes compiled into the same caches (claims),
    said only when there were any: a lone run's line stays as it was."""
    if not (c.get("waited") or c.get("loaded") or c.get("taken_over")):
        return ""
    line = (f"; keys: {c['compiled']} compiled here, {c['waited']} waited for and {c['loaded']} loaded from other "
            f"processes, {c['node_keys']} on the node")
    return line + (f", {len(c['taken_over'])} taken over" if c.get("taken_over") else "")


def render_trace(t: dict) -> str:
    families = ", ".join(f"{f} {n}" for f, n in t.get("compiles_by_family", {}).items())
    out = (f"verify-trace: {t['steps']} serving-trace steps (seed {t['seed']}): {t['compiles']} post-seal compiles"
           + (f" ({families})" if families else ""))
    if t.get("first_step_ms") is not None:
        out += f"; first step {t['first_step_ms']:.1f} ms, p50 {t['p50_ms']:.2f} ms, p99 {t['p99_ms']:.2f} ms"
    out += "\n"
    if t.get("error"):
        out += f"  error: {t['error']}\n"
    for e in t.get("post_seal_events", [])[:20]:
        out += f"  post-seal: {e.get('step')}: {e.get('kernel')} {e.get('repr') or ''}\n"
    return out


def _dash(v):
    return "-" if v is None else v


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"


def environment(device: str | None = None) -> dict:
    """Versions and the device, for the report (only modules already imported are asked)."""
    env = {"python": sys.version.split()[0], "platform": platform.platform(),
           "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"),
           "kernel_config_dir": os.environ.get("WARMUP_KERNEL_CONFIG_DIR"),
           "triton_interpret": os.environ.get("TRITON_INTERPRET")}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        try:
            if torch.cuda.is_available():
                idx = torch.cuda.current_device()
                env["gpu"] = torch.cuda.get_device_name(idx)
                env["capability"] = capability_text(torch.cuda.get_device_capability(idx))
                env["cuda"] = torch.version.cuda
                env["num_sms"] = torch.cuda.get_device_properties(idx).multi_processor_count
        except Exception:  # noqa: BLE001
            pass
    for name in ("triton", "flashinfer"):
        mod = sys.modules.get(name)
        if mod is not None:
            env[name] = getattr(mod, "__version__", "?")
    cache_env = triton_cache.invalidating_env()
    if cache_env is not None:
        env["triton_cache_env"] = cache_env
    key_parts = triton_cache.process_key_parts()
    if key_parts is not None:
        env["triton_key_parts"] = key_parts
    install = deep_gemm_install.find_install()
    if install is not None:
        env["deep_gemm"] = install.version or "?"
        env["deep_gemm_install"] = {"module": install.module, "root": install.root,
                                    "checked_by_model": install.version in CHECKED_VERSIONS}
    env["device"] = device
    return env
