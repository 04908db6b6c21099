"""The proof's server mode (bench/vllm_serve_trace.py), on CPU, against a stand-in `vllm`.

The stand-in is a package written to a temporary directory and put first on PYTHONPATH: its
``vllm.entrypoints.cli.main`` (what `vllm serve` runs) records its argv and environment, starts an
"engine core" child in its process group, prints vLLM 0.25.0-like start-up lines (the phases'
lines, tqdm's DeepGEMM bar on stderr, the JIT monitor's activation, the plugin's lines when
WARMUP_PLAN is set), listens only after a delay (vLLM listens once the engine is up), then serves
/health, /metrics, /version and /v1/completions. With FAKE_FAIL_TOP_K=50 every request with that
top_k gets the 500 vLLM's JIT monitor causes in error mode (and the monitor's line, and a Triton
cubin new in the cache after ready). Checked: ready from /health, the requests and the sampling
parameters actually sent, failures counted, the stop (no process left), the log's phases, the
summary's server rows and checks, the plot's layout, the proof script's dry run in MODE=server.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_vllm_startup_bench import load  # the bench scripts loaded by path, once

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
CONFIG = os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json")

FAKE_MAIN = r'''
import json, os, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORD = os.environ["FAKE_RECORD"]
FAIL_TOP_K = int(os.environ.get("FAKE_FAIL_TOP_K", "0"))
READY_DELAY = float(os.environ.get("FAKE_READY_DELAY", "0.6"))
BUNDLE_DELAY = float(os.environ.get("FAKE_BUNDLE_DELAY", "0"))  # with WARMUP_BUNDLE_OUT: its line, after ready
SPECULATIVE = "--speculative-config" in sys.argv
LOCK = threading.Lock()


def log(msg, who="APIServer", level="INFO", stream=sys.stdout):
    stream.write(f"({who} pid={os.getpid()}) {level} 11-27 03:03:12 [fake.py:1] {msg}\n")
    stream.flush()


def engine_core():
    """A child in the server's process group, as vLLM's engine core is; stubborn ones ignore signals."""
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if os.environ.get("FAKE_STUBBORN") else "")
            + "print('(EngineCore_DP0 pid=0) INFO engine core up', flush=True)\n"
            "time.sleep(600)\n")
    return subprocess.Popen([sys.executable, "-c", code])


def start_up():
    plugin = bool(os.environ.get("WARMUP_PLAN"))
    steps = [("Starting to load model /models/x...", 0.05),
             ("Model loading took 1.2 GiB memory and 0.100000 seconds", 0.05),
             ("Dynamo bytecode transform time: 0.05 s", 0.02),
             ("torch.compile took 0.08 s in total", 0.02),
             ("Available KV cache memory: 60.12 GiB", 0.05),
             ("GPU KV cache size: 465,104 tokens", 0.0),
             ("Maximum concurrency for 4,096 tokens per request: 113.55x", 0.05)]
    for msg, pause in steps:
        log(msg, "EngineCore_DP0")
        time.sleep(pause)
    if plugin:
        log("warmup-planner: plan vllm-0.25-plugin for engine llama, 12 steps; precompile: 4 jobs", "EngineCore_DP0")
        time.sleep(0.05)
        log("warmup-planner: stage deep_gemm: 3 steps, 3 calls, deep_gemm 0 compiled, 3 loaded, 0.04 s",
            "EngineCore_DP0")
        log("warmup-planner: plan vllm-0.25-plugin ran: 12 steps, 20 calls in 0.1 s (0 compiled)", "EngineCore_DP0")
        with open(os.environ["WARMUP_PLAN_REPORT"], "w") as f:
            json.dump({"status": "ok", "precompile": {"jobs": 4}}, f)
    else:
        for pct in (0, 50, 100):  # tqdm's bar: \r between updates, \n at the end
            sys.stderr.write(f"\rDeepGEMM warmup: {pct:3d}%|#####| {pct}/100")
            sys.stderr.flush()
            time.sleep(0.05)
        sys.stderr.write("\n")
    log("Graph capturing finished in 0 secs, took 0.50 GiB", "EngineCore_DP0")
    log("Kernel JIT monitor activated; monitored JIT compilations during inference will use mode=error.",
        "EngineCore_DP0")
    log("init engine (profile, create kv cache, warmup model) took 0.40 s (compilation: 0.08 s)", "EngineCore_DP0")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # uvicorn's access log, roughly
        pass

    def reply(self, status, body, kind="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"", "text/plain")
        elif self.path == "/metrics":
            self.reply(200, b'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="29069"} 1.0\n',
                       "text/plain")
        elif self.path == "/version":
            self.reply(200, {"version": "0.25.0"})
        else:
            self.reply(404, {"error": "no route"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with LOCK, open(os.path.join(RECORD, "requests.jsonl"), "a") as f:
            f.write(json.dumps({**body, "prompt": len(body["prompt"])}) + "\n")
        if SPECULATIVE and ("min_p" in body or "logit_bias" in body):  # vLLM 0.25's refusal
            self.reply(400, {"error": {"message": "The min_p and logit_bias sampling parameters are not yet "
                                                  "supported with speculative decoding.", "code": 400}})
            return
        if FAIL_TOP_K and body.get("top_k") == FAIL_TOP_K:
            log("RuntimeError: Triton kernel JIT compilation during inference: _topk_topp_kernel. This causes a "
                "latency spike; consider extending warmup to cover this shape/config.", "EngineCore_DP0", "ERROR")
            cubin = os.path.join(os.environ["TRITON_HOME"], ".triton", "cache", "HASH", "_topk_topp_kernel.cubin")
            os.makedirs(os.path.dirname(cubin), exist_ok=True)
            open(cubin, "w").close()
            self.reply(500, {"error": {"message": "EngineCore encountered an issue", "code": 500}})
            return
        choices = [{"index": k, "text": "", "token_ids": [7] * body["max_tokens"],
                    "logprobs": {"tokens": ["token_id:7"]} if body.get("logprobs") else None}
                   for k in range(body.get("n", 1))]
        self.reply(200, {"choices": choices})


def main():
    with open(os.path.join(RECORD, "server.json"), "w") as f:
        json.dump({"argv": sys.argv, "pid": os.getpid(), "pgid": os.getpgid(0),
                   "env": {k: os.environ.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "WARMUP_PLAN")}}, f)
    engine = engine_core()
    with open(os.path.join(RECORD, "engine.pid"), "w") as f:
        f.write(str(engine.pid))
    args = sys.argv[1:]
    assert args[0] == "serve", args
    port = int(args[args.index("--port") + 1])
    try:  # Ctrl-C while starting or serving: vLLM shuts its engine core down either way
        start_up()
        time.sleep(READY_DELAY)
        ThreadingHTTPServer.request_queue_size = 2048  # uvicorn's backlog (the default 5 resets connections)
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        log(f"Starting vLLM server on http://127.0.0.1:{port}")
        log("Application startup complete.")
        if os.environ.get("WARMUP_BUNDLE_OUT"):  # the plugin's writer thread, its one outcome line
            threading.Timer(BUNDLE_DELAY, log, (f"warmup-planner: bundle {os.environ['WARMUP_BUNDLE_OUT']} written "
                                                f"{BUNDLE_DELAY:.1f} s after ready, in {BUNDLE_DELAY:.1f} s beside "
                                                "vLLM (its files listed at ready in 0.01 s): 3 files",
                                                "EngineCore_DP0")).start()
        server.serve_forever()
    except KeyboardInterrupt:
        log("[shutdown] API server: shutdown triggered")
    if not os.environ.get("FAKE_STUBBORN"):
        engine.terminate()
        engine.wait()


if __name__ == "__main__":
    main()
'''


def fake_vllm(root) -> str:
    """The stand-in package under root/site; returns that directory (for PYTHONPATH)."""
    site = root / "site"
    for pkg in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli"):
        (site / pkg).mkdir(parents=True, exist_ok=True)
        (site / pkg / "__init__.py").write_text("")
    (site / "vllm" / "entrypoints" / "cli" / "main.py").write_text(textwrap.dedent(FAKE_MAIN))
    return str(site)


def run_driver(tmp_path, arm="stock", extra=(), **env_extra):
    """bench/vllm_serve_trace.py end to end against the stand-in; (result, records, fake's record dir)."""
    record, out, cache = tmp_path / "record", tmp_path / "run", tmp_path / "cache"
    for d in (record, cache / "vllm", cache / "triton", cache / "inductor"):
        d.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMUP_", "VLLM_", "FAKE_"))}
    env.update(PYTHONPATH=fake_vllm(tmp_path) + os.pathsep + ROOT, FAKE_RECORD=str(record),
               VLLM_ENABLE_V1_MULTIPROCESSING="0",  # the driver must remove it
               VLLM_CACHE_ROOT=str(cache / "vllm"), TRITON_HOME=str(cache / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
               WARMUP_PLAN_REPORT=str(out / "plan_report.json"), WARMUP_JIT_LOG=str(out / "plugin_jit.jsonl"))
    env.update(env_extra)
    if arm == "plugin":
        env["WARMUP_PLAN"] = "vllm-0.25-plugin"
    cmd = [sys.executable, os.path.join(BENCH, "vllm_serve_trace.py"), "--config", CONFIG, "--arm", arm,
           "--model-dir", str(tmp_path / "model"), "--out", str(out), "--time-limit", "60", "--reserve-s", "10",
           *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    result = json.loads((out / "result.json").read_text())
    records = [json.loads(x) for x in (out / "http_requests.jsonl").read_text().splitlines()] \
        if (out / "http_requests.jsonl").exists() else []
    return done, result, records, record, out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def stock_run(tmp_path_factory):
    """One stock run: 300 requests, the top-k kind failing as the JIT monitor in error mode makes it."""
    return run_driver(tmp_path_factory.mktemp("stock"), "stock", FAKE_FAIL_TOP_K="50")


def test_server_is_started_as_vllm_serve_with_the_jit_monitor_in_error_mode(stock_run):
    done, result, _, record, _ = stock_run
    assert done.returncode == 0, done.stderr[-2000:]
    server = json.loads((record / "server.json").read_text())
    argv = server["argv"][1:]
    assert argv[:2] == ["serve", result["model_dir"]] and "--skip-tokenizer-init" in argv
    for flag, value in (("--jit-monitor-mode", "error"), ("--load-format", "dummy"), ("--max-model-len", "4096"),
                        ("--host", "127.0.0.1"), ("--tensor-parallel-size", "1"), ("--seed", "0"),
                        ("--gpu-memory-utilization", "0.85")):
        assert argv[argv.index(flag) + 1] == value
    assert server["env"] == {"VLLM_ENABLE_V1_MULTIPROCESSING": None, "WARMUP_PLAN": None}
    assert result["server"]["command"][1:3] == ["-m", "vllm.entrypoints.cli.main"]
    assert os.path.exists(os.path.join(result["model_dir"], "config.json"))


def test_ready_is_the_first_health_200_from_the_process_start(stock_run):
    _, result, _, _, out = stock_run
    assert result["mode"] == "server" and result["ready_source"] == "first 200 from GET /health"
    # the stand-in prints for about 0.5 s, then waits 0.6 s before it listens (and Python starts)
    assert 1.0 < result["ready_s"] < 15.0
    assert result["ready_s"] == pytest.approx(result["ready_at"] - result["process_start"], abs=0.01)
    assert result["kv_cache"]["num_gpu_blocks"] == 29069 and result["kv_cache"]["block_size"] == 16
    assert result["kv_cache"]["kv_cache_size_tokens"] == 465104
    assert result["versions"]["vllm"] == "0.25.0"


def test_requests_mix_sampling_and_count_failures(stock_run):
    _, result, records, record, _ = stock_run
    sent = [json.loads(x) for x in (record / "requests.jsonl").read_text().splitlines()]
    assert len(sent) == len(records) == 300
    http = result["http"]
    top_k = [r for r in records if r["kind"] == "top-k"]
    assert http["failed"] == len(top_k) == http["by_kind"]["top-k"]["sent"] > 0
    assert http["ok"] == 300 - len(top_k) and http["by_status"] == {"200": 300 - len(top_k), "500": len(top_k)}
    assert http["by_kind"]["top-k"]["ok"] == 0 and http["by_kind"]["greedy"]["ok"] == http["by_kind"]["greedy"]["sent"]
    assert all(r["status"] == 500 for r in top_k)
    assert len(http["by_kind"]) == 11 and http["by_kind"]["n>1 alone"]["sent"] == 1
    assert min(v["sent"] for k, v in http["by_kind"].items() if k != "n>1 alone") >= 29
    # what went over the wire: every kind of sampling, n of 2-4, seeds, logprobs, prompt lengths
    assert sum(b["temperature"] == 0.0 for b in sent) >= 29
    assert any("top_p" in b and "top_k" in b for b in sent) and any("min_p" in b for b in sent)
    assert {b.get("n", 1) for b in sent} == {1, 2, 3, 4}
    assert len({b["seed"] for b in sent if "seed" in b}) >= 30
    assert all(b["return_tokens_as_token_ids"] for b in sent if b.get("logprobs"))
    assert min(b["prompt"] for b in sent) >= 1 and max(b["prompt"] for b in sent) > 500
    assert len({b["max_tokens"] for b in sent}) > 30 and all(b["ignore_eos"] for b in sent)
    ok = [r for r in records if r["status"] == 200]
    assert all(r["choices"] == r["n"] and r["tokens"] == r["n"] * r["max_tokens"] for r in ok)
    assert result["first_request_s"] == records[0]["latency_s"] and result["trace_s"] > 0
    assert [b["requests"] for b in result["batches"]] == [1, 288, 11]
    # issue 53: one request of each kind alone, after the concurrent ones, the last an n=2 at temperature 0.6
    lone = [r for r in records if r.get("alone")]
    assert [r["kind"] for r in lone][-1] == "n>1 alone" and len({r["kind"] for r in lone}) == 11
    assert (sent[-1]["n"], sent[-1]["temperature"], "top_p" in sent[-1]) == (2, 0.6, False)
    assert min(r["start"] for r in lone) >= max(r["end"] for r in records[1:] if not r.get("alone"))
    assert all(a["end"] <= b["start"] for a, b in zip(lone, lone[1:])), "one at a time"


def test_the_jit_monitor_lines_and_the_caches_after_ready(stock_run):
    _, result, _, _, out = stock_run
    monitor = result["vllm_jit_monitor"]
    assert monitor["mode"] == "error" and monitor["mode_requested"] == "error" and monitor["activated_at"]
    assert monitor["kernels_after_ready"] == ["Triton _topk_topp_kernel"]
    assert monitor["lines_after_ready"] == result["http"]["failed"]
    assert result["compiles_after_ready"]["triton"] == 1 and result["compiles_after_ready"]["events"] > 1
    assert result["cache_new_after_ready"]["kernels"] == {"triton": 1}
    assert result["cache_new_to_ready"]["kernels"] == {}


def test_the_server_stops_cleanly(stock_run):
    _, result, _, record, _ = stock_run
    server = result["server"]
    assert server["signal"] == "SIGINT" and server["rc"] == 0 and server["leftover_pids"] == []
    assert len(server["group_at_stop"]) == 2  # the API server and its engine core
    assert not alive(int((record / "engine.pid").read_text()))


def test_phases_are_read_from_the_log(stock_run, tmp_path):
    _, result, _, _, out = stock_run
    phases = {p["name"]: p for p in result["phases"]}
    for name in ("engine start (imports, device)", "weights", "memory profile", "torch.compile", "DeepGEMM warmup",
                 "CUDA graphs", "warmup (KV cache allocation, compile_or_warm_up_model)",
                 "init engine (profile, KV cache, warmup)", "API server up (app, uvicorn)", "first request"):
        assert name in phases, name
    assert phases["DeepGEMM warmup"]["end"] - phases["DeepGEMM warmup"]["start"] > 0.05  # tqdm's \r updates
    assert phases["API server up (app, uvicorn)"]["end"] == pytest.approx(result["ready_at"], abs=1e-3)
    assert phases["engine start (imports, device)"]["start"] == pytest.approx(result["process_start"], abs=1e-3)
    assert phases["weights"]["end"] <= phases["memory profile"]["end"] <= result["ready_at"]
    assert any(n.startswith("HTTP requests (288, 16 at a time)") for n in phases)
    assert any(n.startswith("HTTP requests alone (11, one at a time)") for n in phases)
    assert result["plugin_active"] is False and result["plugin_lines"] == 0
    text = (out / "server.log").read_text()
    assert " err " in text and " out " in text and "Application startup complete." in text


def test_parse_log_times_a_phase_by_the_seconds_its_line_gives():
    serve = load("vllm_serve_trace")
    lines = [(100.0, "out", "(EngineCore_DP0 pid=5) INFO 11-27 [x.py:1] Starting to load model /m..."),
             (112.0, "out", "(EngineCore_DP0 pid=5) INFO [x.py:1] Model loading took 8.1 GiB memory and 11.5 seconds"),
             (140.0, "out", "INFO [x.py:1] Available KV cache memory: 60.1 GiB"),
             (150.0, "out", "INFO [x.py:1] warmup-planner: stage triton: 4 steps, 8 calls, triton 4 compiled, 2.50 s"),
             (160.0, "out", "WARNING [jit_monitor.py:1] Triton kernel JIT compilation during inference: k1. This ..."),
             (161.0, "out", "Triton autotuning for function k2,"),
             (170.0, "out", "RuntimeError: Triton kernel JIT compilation during inference: k3. This causes ...")]
    parsed = serve.parse_log(lines, 90.0, ready_at=160.5)
    phases = {p["name"]: p for p in parsed["phases"]}
    assert phases["weights"] == {"name": "weights", "start": 100.5, "end": 112.0}
    assert phases["memory profile"] == {"name": "memory profile", "start": 112.0, "end": 140.0}
    start = "engine start (imports, device)"
    assert phases[start] == {"name": start, "start": 90.0, "end": 100.0}
    assert phases["plan: triton"] == {"name": "plan: triton", "start": 147.5, "end": 150.0}
    monitor = parsed["monitor"]
    assert monitor["kernels_after_ready"] == ["Triton k3"] and monitor["autotune_after_ready"] == 1
    assert [line["after_ready"] for line in monitor["lines"]] == [False, True, True]
    assert serve.compiles_after_ready(monitor)["triton"] == 1


def test_plugin_arm_reads_its_plugin_lines_and_report(tmp_path):
    done, result, records, _, _ = run_driver(tmp_path, "plugin", ["--requests", "40", "--concurrency", "8"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert result["plugin_active"] is True and result["plugin"]["found"] and result["plugin"]["status"] == "ok"
    assert result["plugin_lines"] == 3 and "plan: deep_gemm" in {p["name"] for p in result["phases"]}
    assert result["http"]["ok"] == 40 and result["compiles_after_ready"]["triton"] == 0
    assert result["cache_new_after_ready"]["files"] == {}
    assert [r["events"] for r in result["rank_events_after_ready"]] == [0]


def test_the_driver_killed_by_timeout_stops_the_server_first(tmp_path):
    """`timeout` sends SIGTERM: the server (still starting) goes, and result.json says why. The signal
    is sent once the driver has read the server's start-up lines (a fixed `timeout 2` raced the start
    on a loaded machine)."""
    record, out = tmp_path / "record", tmp_path / "run"
    record.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMUP_", "VLLM_", "FAKE_"))}
    env.update(PYTHONPATH=fake_vllm(tmp_path) + os.pathsep + ROOT, FAKE_RECORD=str(record), FAKE_READY_DELAY="30")
    cmd = [sys.executable, os.path.join(BENCH, "vllm_serve_trace.py"), "--config", CONFIG,
           "--arm", "stock", "--model-dir", str(tmp_path / "model"), "--out", str(out)]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log, deadline = out / "server.log", time.monotonic() + 60
    while not (log.exists() and "init engine" in log.read_text()) and driver.poll() is None:
        assert time.monotonic() < deadline, "the stand-in server's start-up lines never reached server.log"
        time.sleep(0.05)
    driver.send_signal(signal.SIGTERM)                  # what `timeout` sends at the run's time limit
    _, stderr = driver.communicate(timeout=30)
    assert driver.returncode != 0, stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["error"] == "SystemExit: killed by signal 15 (the run's time limit)"
    assert result["server"]["leftover_pids"] == [] and result["server"]["signal"] == "SIGINT"
    assert int((out / "server.pgid").read_text()) == result["server"]["pid"]
    assert not alive(int((record / "engine.pid").read_text()))
    assert "weights" in {p["name"] for p in result["phases"]} and "ready_s" not in result


def test_a_server_that_ignores_sigint_is_killed_with_its_group(tmp_path):
    done, result, _, record, _ = run_driver(tmp_path, "stock", ["--requests", "10", "--stop-grace", "1"],
                                         FAKE_STUBBORN="1")
    assert done.returncode == 0, done.stderr[-2000:]
    server = result["server"]
    assert server["signal"] == "SIGINT, then SIGKILL" and server["killed"] and server["leftover_pids"] == []
    assert not alive(int((record / "engine.pid").read_text()))


def test_a_server_that_dies_before_ready_is_an_error_with_its_log(tmp_path):
    done, result, _, _, _ = run_driver(tmp_path, "stock", FAKE_RECORD="/nonexistent/dir")
    assert done.returncode != 0
    assert "before /health answered 200" in result["error"] and "ready_s" not in result
    assert result["server"]["leftover_pids"] == []


def write_server_run(runs, name, arm, ready, ok, failed, jit_after=0, cache_files=None, blocks=29069, mode="error"):
    os.makedirs(runs / name)
    (runs / name / "run.json").write_text(json.dumps({"rc": 0, "wall_s": ready + 30}))
    counts = {"triton": jit_after, "deep_gemm": None, "torch_compile": 0, "flashinfer": None, "events": jit_after}
    (runs / name / "result.json").write_text(json.dumps({
        "mode": "server", "arm": arm, "ready_s": ready, "kv_cache": {"num_gpu_blocks": blocks}, "trace_s": 20.0,
        "first_request_s": 0.2, "compiles_after_ready": counts, "plugin_active": arm == "plugin",
        "http": {"requests": ok + failed, "sent": ok + failed, "ok": ok, "failed": failed},
        "vllm_jit_monitor": {"mode": mode, "lines_after_ready": jit_after * 3,
                             "kernels_after_ready": ["Triton k"] * bool(jit_after)},
        "cache_new_after_ready": {"kernels": {}, "files": cache_files or {}}}))


def test_summary_server_rows_and_checks(tmp_path, capsys):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    write_server_run(runs, "stock-cold", "stock", 360.0, 270, 30, jit_after=1, cache_files={"triton": 2})
    write_server_run(runs, "plugin-cold", "plugin", 170.0, 300, 0)
    rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
    assert rows["stock-cold"]["mode"] == "server" and rows["stock-cold"]["http_failed"] == 30
    assert rows["stock-cold"]["jit_lines_after_ready"] == 3 and rows["stock-cold"]["cache_files_after_ready"] == 2
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["cold start >= 2x faster"]["pass"] is True
    assert checks["0 compiles after ready (plugin)"]["pass"] is True
    http = checks["server: every HTTP request ok (plugin; vLLM's JIT monitor in error mode)"]
    assert http["pass"] is True and "stock-cold 270 ok, 30 failed" in http["detail"]
    assert checks["server: no new file in any cache directory after ready (plugin)"]["pass"] is True
    assert "HTTP 270 ok / 30 failed" in summary.line(rows["stock-cold"])
    write_server_run(runs, "plugin-warm", "plugin", 60.0, 299, 1, jit_after=1, cache_files={"deep_gemm": 1})
    rows["plugin-warm"] = summary.row(str(runs), "plugin-warm")
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["server: every HTTP request ok (plugin; vLLM's JIT monitor in error mode)"]["pass"] is False
    assert checks["server: no new file in any cache directory after ready (plugin)"]["pass"] is False
    assert checks["0 compiles after ready (plugin)"]["pass"] is False
    # every request ok, but vLLM's JIT monitor never activated: proves nothing
    write_server_run(runs, "plugin-warm2", "plugin", 60.0, 300, 0, mode=None)
    rows["plugin-warm"] = summary.row(str(runs), "plugin-warm2")
    check = {c["check"]: c for c in summary.checks(rows)}[
        "server: every HTTP request ok (plugin; vLLM's JIT monitor in error mode)"]
    assert check["pass"] is False and "plugin-warm 300 ok, 0 failed of 300 (JIT monitor: not activated)" in check["detail"]


def test_greedy_requests_alone_are_one_digest_of_their_tokens():
    """Issue 54: the tokens a start gives its greedy requests sent alone, as one digest: the same
    tokens give the same digest whatever else ran, other tokens another one."""
    trace = load("vllm_serve_trace")

    def rec(i, kind, alone, tokens, status=200):
        body = json.dumps({"choices": [{"token_ids": tokens}]}).encode()
        return {"i": i, "kind": kind, "alone": alone, "status": status, **trace.returned(body)}

    lone = [rec(5, "greedy", True, [1, 2]), rec(6, "seeded", True, [3])]
    noise = [rec(1, "greedy", False, [9]), rec(7, "top-k", True, [8]), rec(8, "greedy", True, None, status=500)]
    first = trace.greedy_alone(lone + noise)
    assert first["requests"] == 2 and first["sha256"] == trace.greedy_alone(list(reversed(lone)))["sha256"]
    assert trace.greedy_alone([rec(5, "greedy", True, [1, 2]), rec(6, "greedy", True, [4])])["sha256"] != first["sha256"]
    assert trace.greedy_alone(noise[:2]) == {"requests": 0, "sha256": None}


def test_the_outputs_check_groups_the_runs_by_their_greedy_tokens(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    for name, arm, sha, fork in (("stock-warm", "stock", "aa", False), ("plugin-warm", "plugin", "aa", True)):
        write_server_run(runs, name, arm, 50.0, 300, 0)
        result = json.loads((runs / name / "result.json").read_text())
        result["http"]["greedy_alone"] = {"requests": 4, "sha256": sha}
        (runs / name / "result.json").write_text(json.dumps(result))
        (runs / name / "run.json").write_text(json.dumps({"rc": 0, "engine_core_fork": "1" if fork else "0"}))
    rows = {n: summary.row(str(runs), n) for n in ("stock-warm", "plugin-warm")}
    name = "the same greedy and seeded tokens in every run (requests alone; engine core forked or not)"
    check = {c["check"]: c for c in summary.checks(rows)}[name]
    assert check["pass"] is True and check["detail"] == "aa: plugin-warm (fork), stock-warm"
    rows["plugin-warm"]["greedy_alone_sha256"] = "bb"
    assert {c["check"]: c for c in summary.checks(rows)}[name]["pass"] is False
    del rows["stock-warm"]
    assert {c["check"]: c for c in summary.checks(rows)}[name]["pass"] is None


def test_summary_of_offline_runs_has_no_server_checks(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    os.makedirs(runs / "plugin-cold")
    (runs / "plugin-cold" / "result.json").write_text(json.dumps({"arm": "plugin", "ready_s": 100.0}))
    rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
    assert rows["plugin-cold"]["mode"] == "offline"
    assert not any(c["check"].startswith("server:") for c in summary.checks(rows))


def test_plot_draws_server_runs_side_by_side(stock_run, tmp_path):
    plot = load("plot_startup_timeline")
    _, stock, _, _, _ = stock_run
    lay = plot.layout([("stock-cold", stock), ("plugin-cold", stock | {"arm": "plugin"})])
    names = {b["name"] for b in lay["bars"]}
    assert {"weights", "DeepGEMM warmup", "CUDA graphs", "API server up (app, uvicorn)"} <= names
    assert plot.category("API server up (app, uvicorn)")[0] == "engine start (imports, device, API server)"
    assert plot.category("HTTP requests (288, 16 at a time)")[0] == "requests after ready"
    assert plot.category("HTTP requests alone (11, one at a time)")[0] == "requests after ready"
    assert plot.category("init engine (profile, KV cache, warmup)")[0] == "init engine (profile, KV cache, warmup)"
    assert plot.category("start to ready (first /health 200)")[0].startswith("start to ready")
    assert {r["run"] for r in lay["rows"]} == {"stock-cold", "plugin-cold"}
    readies = [m for m in lay["marks"] if m["what"].startswith("ready")]
    assert len(readies) == 2 and readies[0]["at"] == pytest.approx(stock["ready_s"], abs=0.01)
    assert any(m["what"].startswith("JIT after ready") for m in lay["marks"])
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("drawing needs matplotlib")
    out = tmp_path / "t.png"
    plot.draw([("stock-cold", stock), ("plugin-cold", stock | {"arm": "plugin"})], str(out), None, "all")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def proof_dry_run(tmp_path, parts: str, **settings) -> str:
    """What bench/vllm_startup_proof.sh --dry-run prints (server mode with FlashInfer unless `settings`
    say otherwise) under PROOF_ROOT=tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMUP_", "VLLM_", "MODE", "PARTS", "REQUESTS"))}
    env.update({"MODE": "server", "PARTS": parts, "WITH_FLASHINFER": "1", "PROOF_ROOT": str(tmp_path),
                "VLLM_USE_FLASHINFER_SAMPLER": "1", **settings})
    done = subprocess.run(["bash", os.path.join(BENCH, "vllm_startup_proof.sh"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_proof_script_dry_run_in_server_mode(tmp_path):
    out = proof_dry_run(tmp_path, "plugin-cold stock-cold")
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 2 and all("--requests 300" in x for x in drivers)
    assert all("-u VLLM_ENABLE_V1_MULTIPROCESSING" in x for x in drivers)
    assert not any("VLLM_ENABLE_V1_MULTIPROCESSING=0" in x for x in drivers)
    assert all(f"{tmp_path}/runs/llama-3.1-8b-instruct-fp8-block-fi-serve/" in x for x in drivers)
    assert "WARMUP_PLAN=vllm-0.25-plugin" in drivers[0] and "WARMUP_PLAN=" not in drivers[1]
    assert "TORCH_LOGS=recompiles" in drivers[0] and "TORCH_LOGS" not in drivers[1]  # the failed guard, in the log
    assert "WARMUP_TORCH_COMPILE_AFTER_READY=compile" in drivers[0]  # the plan's coverage, not Dynamo's eager net
    servers = [x for x in out.splitlines() if x.startswith("+ (server")]
    assert len(servers) == 2
    assert all("-m vllm.entrypoints.cli.main serve" in x
               and "--load-format dummy" in x and "--skip-tokenizer-init" in x for x in servers)
    # vLLM's own JIT monitor judges the plugin arm in error mode; stock keeps vLLM's default (warn)
    assert "--jit-monitor-mode error" in drivers[0] and "--jit-monitor-mode error" in servers[0]
    assert "--jit-monitor-mode warn" in drivers[1] and "--jit-monitor-mode warn" in servers[1]
    assert "vllm_plugin_trace.py" not in out
    offline = proof_dry_run(tmp_path, "plugin-cold stock-cold", MODE="offline", MODEL="qwen3-8b")
    assert "vllm_plugin_trace.py" in offline and "--requests 500" in offline
    assert "tests/fixtures/hf/qwen3-8b.json" in offline and "vllm_serve_trace.py" not in offline


def test_proof_script_dry_run_of_an_mla_model_at_tp4_with_expert_parallelism(tmp_path):
    """Issue 48: DeepSeek-V3 cut to 5 layers on four GPUs; its check needs the setup's mla part,
    EP=1 passes --enable-expert-parallel to the driver and to `vllm serve`, a series of its own."""
    out = proof_dry_run(tmp_path, "stock-cold", MODEL="deepseek-v3-5l", TP="4", EP="1")
    [driver] = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    [server] = [x for x in out.splitlines() if x.startswith("+ (server")]
    assert f"{tmp_path}/runs/deepseek-v3-5l-tp4-ep-fi-serve/stock-cold/" in driver
    assert "--enable-expert-parallel" in driver and "--tensor-parallel-size 4" in driver
    assert "--enable-expert-parallel" in server and "--tensor-parallel-size 4" in server
    assert "+ bash bench/vllm_gpu_setup.sh check core ext py plugin fi mla" in out.splitlines()
    llama = proof_dry_run(tmp_path, "stock-cold")
    assert "--enable-expert-parallel" not in llama
    assert "+ bash bench/vllm_gpu_setup.sh check core ext py plugin fi" in llama.splitlines()


def test_proof_script_hides_and_watches_the_building_caches_of_a_bundle_cold_run(tmp_path):
    """Issue 43 item 5: a bundle-cold run's processes carry the tripwire (bench/tripwire) on the
    bundle's building roots that are not the run's own, read from the bundle."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "executor"))
    from test_relocation import fill  # noqa: E402 - its modules import each other by name
    from test_startup_bundle import vllm_fp  # noqa: E402

    from executor.bundle import startup

    series = "llama-3.1-8b-instruct-fp8-block-fi-serve"
    os.makedirs(tmp_path / "bundles")
    startup.build(str(tmp_path / "bundles" / f"{series}.warmup"), fill(tmp_path / "cache" / series / "bundle-build"),
                  vllm_fp(), startup.Origin())
    [driver] = [x for x in proof_dry_run(tmp_path, "bundle-cold").splitlines()
                if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert f"PYTHONPATH={ROOT}/bench/tripwire:" in driver
    roots = next(w for w in driver.split() if w.startswith("WARMUP_TRIPWIRE_ROOTS=")).split("=", 1)[1].split(":")
    assert len(roots) == 6 and all(r.startswith(str(tmp_path / "cache" / series / "bundle-build")) for r in roots)
    assert f"WARMUP_TRIPWIRE_LOG={tmp_path}/runs/{series}/bundle-cold/builder_opens.log" in driver


def test_proof_script_forks_the_engine_core_only_in_the_parts_named(tmp_path, monkeypatch):
    """Issue 54: FORK_PARTS names the runs with WARMUP_ENGINE_CORE_FORK=1, SPAWN_PARTS those with =0; every
    other run is without it (the plugin's default), even where the caller's environment sets it;
    PLUGIN_WARM_FROM=bundle-cold runs plugin-warm on
    the bundle-cold caches with the bundle still named (a warm node), keeping the modules it placed."""
    monkeypatch.setenv("WARMUP_ENGINE_CORE_FORK", "1")  # proof_dry_run drops WARMUP_*; the command unsets it too
    out = proof_dry_run(tmp_path, "plugin-warm_1 plugin-warm_2 stock-warm_1", FORK_PARTS="plugin-warm_2",
                        SPAWN_PARTS="plugin-warm_1", PLUGIN_WARM_FROM="bundle-cold", STOCK_WARM_FROM="bundle-cold")
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 3 and all("-u WARMUP_ENGINE_CORE_FORK" in x for x in drivers)
    assert [next((w for w in x.split() if w.startswith("WARMUP_ENGINE_CORE_FORK=")), None) for x in drivers] == [
        "WARMUP_ENGINE_CORE_FORK=0", "WARMUP_ENGINE_CORE_FORK=1", None]
    cache = f"{tmp_path}/cache/llama-3.1-8b-instruct-fp8-block-fi-serve/bundle-cold/vllm"
    assert all(f"VLLM_CACHE_ROOT={cache}" in x for x in drivers)
    assert ["WARMUP_BUNDLE=" in x for x in drivers] == [True, True, False]
    assert "clear_placed_flashinfer_modules" not in out
    plain = proof_dry_run(tmp_path, "plugin-warm_1")
    assert "WARMUP_BUNDLE=" not in plain and "/plugin/vllm" in plain and "clear_placed_flashinfer_modules" in plain


def test_proof_script_sets_the_start_up_settings_only_in_the_parts_named(tmp_path):
    """Issue 54: COMPILE_LOAD_PARTS, INSPECTION_FORK_PARTS and INSPECTION_SPAWN_PARTS set the plugin's two start-up
    settings in those parts only (never inherited from the caller); NO_MODELINFO_PARTS removes vLLM's model-info
    cache before those warm parts, and never empties a cold run's."""
    out = proof_dry_run(tmp_path, "plugin-warm_1 plugin-warm_2 stock-warm_1", PLUGIN_WARM_FROM="bundle-build",
                        COMPILE_LOAD_PARTS="plugin-warm_2", INSPECTION_FORK_PARTS="plugin-warm_2 stock-warm_1",
                        INSPECTION_SPAWN_PARTS="plugin-warm_1", NO_MODELINFO_PARTS="plugin-warm_2 stock-warm_1")
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 3 and all("-u WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS -u WARMUP_MODEL_INSPECTION_FORK" in x
                                     for x in drivers)
    assert ["WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS=1" in x for x in drivers] == [False, True, False]
    assert ["WARMUP_MODEL_INSPECTION_FORK=1" in x for x in drivers] == [False, True, True]
    assert ["WARMUP_MODEL_INSPECTION_FORK=0" in x for x in drivers] == [True, False, False]
    removed = [x for x in out.splitlines() if x.startswith("+ rm -rf") and x.endswith("/vllm/modelinfos")]
    assert len(removed) == 2


def test_proof_script_gives_flashinfers_nvcc_flags_to_the_parts_named_only(tmp_path):
    """FI_FLAGS_PARTS: those parts' FlashInfer builds get FLASHINFER_EXTRA_CUDAFLAGS=$FI_FLAGS; every other part has it
    unset, whatever the caller's environment holds (a module built with other flags would be rebuilt)."""
    out = proof_dry_run(tmp_path, "plugin-warm_1 plugin-warm_2", PLUGIN_WARM_FROM="bundle-build",
                        FI_FLAGS="--split-compile=0", FI_FLAGS_PARTS="plugin-warm_2",
                        FLASHINFER_EXTRA_CUDAFLAGS="--from-the-caller")
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 2 and all("-u FLASHINFER_EXTRA_CUDAFLAGS" in x for x in drivers)
    assert ["FLASHINFER_EXTRA_CUDAFLAGS=--split-compile=0" in x for x in drivers] == [False, True]
    assert not any("--from-the-caller" in x for x in drivers)


def test_proof_script_detaches_a_long_run_and_collects_it_in_a_later_call(tmp_path):
    """Issue 54: a stock cold longer than one device call. DETACH=1 starts the script again in a session of its
    own and returns; COLLECT=1 waits for it and brings its results to $OUT. Here the detached run stops at the
    set-up's check (no vLLM on this machine): what it wrote still comes back."""
    shown = proof_dry_run(tmp_path, "stock-cold", MODEL="mistral-nemo-instruct-2407-fp8-dynamic", DETACH="1")
    series = "mistral-nemo-instruct-2407-fp8-dynamic-fi-serve"
    [start] = [x for x in shown.splitlines() if "setsid" in x]
    assert f"OUT={tmp_path}/detached/{series}/out" in start and "BUDGET_S=1800" in start
    assert "DETACH=0" in start and "setsid nohup bash bench/vllm_startup_proof.sh" in start
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMUP_", "VLLM_", "MODE", "PARTS", "OUT"))}
    env.update(MODE="server", PARTS="stock-cold", WITH_FLASHINFER="1", PROOF_ROOT=str(tmp_path / "root"),
               MODEL="mistral-nemo-instruct-2407-fp8-dynamic", VLLM_SITE=str(tmp_path / "no-site"))
    script = os.path.join(BENCH, "vllm_startup_proof.sh")
    nothing = subprocess.run(["bash", script], env={**env, "COLLECT": "1", "OUT": str(tmp_path / "out0")},
                             capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 2 and "no detached run" in nothing.stdout
    started = subprocess.run(["bash", script], env={**env, "DETACH": "1", "OUT": str(tmp_path / "out1")},
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and "started detached" in started.stdout, started.stdout + started.stderr
    collected = subprocess.run(["bash", script], env={**env, "COLLECT": "1", "OUT": str(tmp_path / "out2"),
                                                      "BUDGET_S": "60"}, capture_output=True, text=True, timeout=90)
    assert collected.returncode == 0 and "has ended" in collected.stdout, collected.stdout + collected.stderr
    assert "vLLM is not installed here" in (tmp_path / "out2" / "proof.log").read_text()
    assert not (tmp_path / "out1").exists(), "the detaching call brings nothing back"


@pytest.mark.parametrize("parts, setting, named, caller", [
    ("FI_OWN_FLAGS_PARTS", "WARMUP_FLASHINFER_SPLIT_COMPILE", "0", "1"),
    ("MEGA_AOT_OFF_PARTS", "WARMUP_TORCH_MEGA_AOT", "0", "1"),
])
def test_proof_script_sets_a_plugin_setting_in_the_parts_named_only(tmp_path, parts, setting, named, caller):
    """FI_OWN_FLAGS_PARTS (the plugin's split compilation off), MEGA_AOT_OFF_PARTS (vLLM's mega AOT artifact not
    asked for): the setting in those parts; every other part at the plugin's default, whatever the caller's
    environment holds."""
    out = proof_dry_run(tmp_path, "plugin-warm_1 plugin-warm_2", PLUGIN_WARM_FROM="bundle-build",
                        **{parts: "plugin-warm_1", setting: caller})
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 2 and all(f"-u {setting}" in x for x in drivers)
    assert [f"{setting}={named}" in x for x in drivers] == [True, False]
    assert not any(f"{setting}={caller}" in x for x in drivers)


def test_proof_script_runs_plugin_warm_on_the_bundle_builds_caches(tmp_path):
    """PLUGIN_WARM_FROM=bundle-build: one plugin cold run gives the cold row, the bundle and the warm series'
    caches; the warm run names no bundle (it neither writes nor installs one)."""
    out = proof_dry_run(tmp_path, "plugin-warm_1", PLUGIN_WARM_FROM="bundle-build")
    [driver] = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert f"VLLM_CACHE_ROOT={tmp_path}/cache/llama-3.1-8b-instruct-fp8-block-fi-serve/bundle-build/vllm" in driver
    assert "WARMUP_BUNDLE=" not in driver and "WARMUP_BUNDLE_OUT=" not in driver


def test_proof_script_runs_plugin_warm_on_stocks_caches(tmp_path):
    """PLUGIN_WARM_FROM=stock-cold: a node stock vLLM filled, then started with the plugin (its cache rules:
    vLLM's mega AOT artifact stays off there); no bundle named."""
    out = proof_dry_run(tmp_path, "plugin-warm_1", PLUGIN_WARM_FROM="stock-cold")
    [driver] = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert f"VLLM_CACHE_ROOT={tmp_path}/cache/llama-3.1-8b-instruct-fp8-block-fi-serve/stock/vllm" in driver
    assert "WARMUP_BUNDLE=" not in driver and "WARMUP_BUNDLE_OUT=" not in driver


def test_proof_script_runs_the_plugin_default_after_ready_only_in_the_parts_named(tmp_path):
    """Issue 53: the plugin arm compiles after ready (the plan's coverage is counted) but in EAGER_PARTS,
    which run at the plugin's default; the stock arm is never given the plugin's setting."""
    out = proof_dry_run(tmp_path, "plugin-cold_1 plugin-cold_2 stock-warm_1", EAGER_PARTS="plugin-cold_2")
    drivers = [x for x in out.splitlines() if "vllm_serve_trace.py" in x and "--dry-run" not in x]
    assert len(drivers) == 3
    stance = [next((w.split("=", 1)[1] for w in x.split() if w.startswith("WARMUP_TORCH_COMPILE_AFTER_READY=")), None)
              for x in drivers]
    assert stance == ["compile", "eager", None]


def test_the_tripwire_records_every_attempt_on_the_watched_paths_in_every_process(tmp_path):
    watched = tmp_path / "built"
    watched.mkdir()
    (watched / "f").write_text("x")
    log = tmp_path / "opens.log"
    env = {**os.environ, "PYTHONPATH": os.path.join(BENCH, "tripwire"), "WARMUP_TRIPWIRE_ROOTS": str(watched),
           "WARMUP_TRIPWIRE_LOG": str(log)}
    code = ("import os, subprocess, sys\n"
            f"open({str(watched / 'f')!r}).read()\n"
            f"try:\n    open({str(watched / 'gone')!r})\nexcept OSError:\n    pass\n"
            f"open({str(tmp_path / 'other')!r}, 'w').write('y')\n"
            f"subprocess.run([sys.executable, '-c', \"import os; os.listdir({str(watched)!r})\"], check=True)\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    events = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert events == [f"open {watched / 'f'}", f"open {watched / 'gone'}", f"os.listdir {watched}"]


def test_the_generic_variant_lines_are_read_from_the_log():
    trace = load("vllm_serve_trace")
    events = [{"what": "plugin", "line": "INFO warmup-planner: rank 0: 12 generic Triton variants built or loaded "
                                         "in 1.5 s for the 30 variants compiled before ready (18 needed none); ..."},
              {"what": "plugin", "line": "WARNING warmup-planner: rank 0: _gumbel_sample_kernel ran its generic Triton "
                                         "variant after ready (a value class no warmup launch had: k); nothing compiled"},
              {"what": "plugin", "line": "WARNING warmup-planner: rank 1: _gumbel_sample_kernel ran its generic Triton "
                                         "variant after ready (...)"}]
    found = trace.generic_variants(events)
    assert found["generic_variant_runs"] == ["_gumbel_sample_kernel"]
    assert "12 generic Triton variants built" in found["generic_variants_line"]
    assert trace.generic_variants([]) == {"generic_variant_runs": [], "generic_variants_line": None}


def test_the_default_max_model_len_is_the_models_limit_where_lower(tmp_path):
    trace = load("vllm_serve_trace")
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    small.write_text('{"max_position_embeddings": 2048}')
    big.write_text('{"text_config": {"max_position_embeddings": 131072}}')
    assert trace.default_max_model_len(str(small)) == 2048 and trace.default_max_model_len(str(big)) == 4096


# --- the bundle's outcome line (WARMUP_BUNDLE_OUT), waited for before the stop ----------------------------

class GrowingLog:
    """A ServerLog stand-in: snapshot() returns the lines given for that call and the calls before."""

    def __init__(self, arrivals: dict):
        self.arrivals, self.calls, self.lines = arrivals, 0, [(0.0, "out", "(APIServer) INFO Application startup")]

    def snapshot(self) -> list:
        self.calls += 1
        self.lines += [(float(self.calls), "out", text) for text in self.arrivals.get(self.calls, [])]
        return list(self.lines)


class Server:
    """A subprocess.Popen stand-in: running until `exits_after` calls of poll(), then rc 1."""

    def __init__(self, exits_after: int | None = None):
        self.exits_after, self.polls, self.returncode = exits_after, 0, None

    def poll(self):
        self.polls += 1
        if self.exits_after is not None and self.polls > self.exits_after:
            self.returncode = 1
        return self.returncode


WRITTEN = ("(EngineCore_DP0 pid=9) INFO 11-27 03:04:12 [writer.py:55] warmup-planner: bundle "
           "/r/bundles/x.warmup written 41.3 s after ready, in 41.0 s beside vLLM (its files listed at ready "
           "in 0.20 s): 812 files")
NOT_WRITTEN = ("(EngineCore_DP0 pid=9) WARNING 11-27 03:04:12 [writer.py:52] warmup-planner: no bundle "
               "written: a file listed at ready changed: /c/x.cubin")


def test_the_bundle_wait_sees_the_written_line_after_some_polls():
    trace = load("vllm_serve_trace")
    # an install line of another kind first: not the writer's outcome
    log = GrowingLog({2: ["warmup-planner: bundle /r/b.warmup, before vLLM resolves the model: placed"],
                      4: [WRITTEN]})
    got = trace.wait_for_bundle(log, Server(), "/r/bundles/x.warmup", time.time() + 5.0, poll_s=0.01)
    assert got["outcome"] == "written" and got["line"] == WRITTEN and log.calls == 4
    assert got["path"] == "/r/bundles/x.warmup" and 0.0 <= got["waited_s"] < 1.0


def test_the_bundle_wait_sees_the_no_bundle_line():
    trace = load("vllm_serve_trace")
    log = GrowingLog({3: [NOT_WRITTEN]})
    got = trace.wait_for_bundle(log, Server(), "/r/x.warmup", time.time() + 5.0, poll_s=0.01)
    assert (got["outcome"], got["line"], log.calls) == ("not written", NOT_WRITTEN, 3)
    early = "warmup-planner: WARMUP_BUNDLE_OUT: no bundle will be written: /r is not writable"  # at load_model
    assert trace.wait_for_bundle(GrowingLog({1: [early]}), Server(), "/r/x.warmup", time.time() + 5.0,
                                 poll_s=0.01)["outcome"] == "not written"


def test_the_bundle_wait_ends_at_the_deadline():
    trace = load("vllm_serve_trace")
    log, start = GrowingLog({}), time.time()
    got = trace.wait_for_bundle(log, Server(), "/r/x.warmup", start + 0.15, poll_s=0.02)
    assert got == {"path": "/r/x.warmup", "outcome": "not seen before the deadline",
                   "waited_s": got["waited_s"], "line": None}
    assert 0.15 <= time.time() - start < 0.4 and log.calls > 3
    past = trace.wait_for_bundle(GrowingLog({}), Server(), "/r/x.warmup", start - 1.0, poll_s=0.02)
    assert past["outcome"] == "not seen before the deadline" and past["waited_s"] < 0.05


def test_the_bundle_wait_ends_when_the_server_has_exited():
    trace = load("vllm_serve_trace")
    start = time.time()
    got = trace.wait_for_bundle(GrowingLog({}), Server(exits_after=2), "/r/x.warmup", start + 30.0, poll_s=0.02)
    assert got["outcome"] == "not seen: the server exited (rc 1)" and got["line"] is None
    assert time.time() - start < 0.3
    # the line read a poll after the exit (the log's readers lag it) still counts
    late = trace.wait_for_bundle(GrowingLog({2: [WRITTEN]}), Server(exits_after=0), "/r/x.warmup", start + 30.0,
                                 poll_s=0.02)
    assert late["outcome"] == "written"


# --- speculative decoding: the kinds vLLM refuses with it are not sent -----------------------------------

def spec_args(method=None):
    return argparse.Namespace(speculative_method=method, num_speculative_tokens=1)


def test_a_speculative_trace_leaves_out_the_kinds_vllm_refuses_with_the_same_count():
    trace = load("vllm_serve_trace")
    kinds, left_out = trace.sampling_kinds(trace.speculative_config(spec_args("mtp")))
    assert set(left_out) == {"min-p+repetition"} and "HTTP 400" in left_out["min-p+repetition"]
    assert [k for k, _ in kinds] == [k for k, _ in trace.SAMPLING if k != "min-p+repetition"]
    for n in (300, 5):
        items = trace.trace(n, 0, "/m", 4096, kinds)
        assert len(items) == n and [item["i"] for item in items] == list(range(n))
        assert not any("min_p" in item["body"] or "logit_bias" in item["body"] for item in items)
    sent = {item["kind"] for item in trace.trace(300, 0, "/m", 4096, kinds)}
    assert sent == {k for k, _ in kinds} | {"n>1 alone"}


def test_the_kinds_left_out_are_found_by_their_parameters(monkeypatch):
    trace = load("vllm_serve_trace")
    monkeypatch.setattr(trace, "SAMPLING", trace.SAMPLING + (("biased", {"temperature": 0.5, "logit_bias": {"7": 3}}),))
    kinds, left_out = trace.sampling_kinds({"method": "ngram", "num_speculative_tokens": 3})
    assert set(left_out) == {"min-p+repetition", "biased"} and "logit_bias" in left_out["biased"]
    assert all("min_p" not in params and "logit_bias" not in params for _, params in kinds)


def test_without_speculative_decoding_the_trace_is_unchanged():
    trace = load("vllm_serve_trace")
    kinds, left_out = trace.sampling_kinds(trace.speculative_config(spec_args()))
    assert kinds == trace.SAMPLING and left_out == {}
    for n, seed, max_model_len in ((300, 0, 4096), (300, 3, 512), (12, 0, 4096), (1, 5, 4096)):
        assert trace.trace(n, seed, "/m", max_model_len, kinds) == trace.trace(n, seed, "/m", max_model_len,
                                                                                trace.SAMPLING)
    # the bodies as the driver sent them before kinds could be left out (a deliberate change of the
    # trace updates this digest)
    bodies = json.dumps(trace.trace(300, 0, "/m", 4096, kinds), sort_keys=True).encode()
    assert hashlib.sha256(bodies).hexdigest() == "d160ce6e5d8b7edffddfb0e31bc92904721525524b33c411ed68d1534cd1cc85"


def test_dry_run_shows_the_kinds_used(tmp_path):
    cmd = [sys.executable, os.path.join(BENCH, "vllm_serve_trace.py"), "--config", CONFIG, "--arm", "plugin",
           "--model-dir", str(tmp_path / "m"), "--out", str(tmp_path / "o"), "--dry-run"]
    env = {k: v for k, v in os.environ.items() if k != "WARMUP_BUNDLE_OUT"}
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=True).stdout
    spec = subprocess.run(cmd + ["--speculative-method", "mtp"], capture_output=True, text=True, timeout=60,
                          env={**env, "WARMUP_BUNDLE_OUT": "/r/x.warmup"}, check=True).stdout
    driver = [x for x in spec.splitlines() if x.startswith("+ (driver)")][0]
    assert "min-p+repetition," not in driver and "min-p+repetition left out (its min_p" in driver
    assert "the bundle's outcome line" in driver
    assert "kinds: greedy" in plain and "min-p+repetition, logprobs" in plain and "left out" not in plain


def test_a_speculative_bundle_build_run_waits_for_the_bundle_and_sends_no_refused_kind(tmp_path):
    done, result, records, record, _ = run_driver(
        tmp_path, "plugin", ["--requests", "40", "--concurrency", "8", "--speculative-method", "mtp"],
        WARMUP_BUNDLE_OUT=str(tmp_path / "x.warmup"), FAKE_BUNDLE_DELAY="2.5")
    assert done.returncode == 0, done.stderr[-2000:]
    assert result["http"]["ok"] == len(records) == 40 and result["http"]["failed"] == 0
    assert "min-p+repetition" not in result["http"]["by_kind"]
    assert set(result["kinds_left_out"]) == {"min-p+repetition"}
    bundle = result["bundle_out"]
    assert bundle["outcome"] == "written" and bundle["path"] == str(tmp_path / "x.warmup")
    assert f"bundle {tmp_path / 'x.warmup'} written" in bundle["line"] and bundle["waited_s"] > 0.5
    assert result["server"]["signal"] == "SIGINT"  # stopped after the line, not before it
