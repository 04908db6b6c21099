#!/usr/bin/env python3
"""One run of the vLLM start-up proof in server mode: `vllm serve` as users start it, over HTTP.

    python3 bench/vllm_serve_trace.py --config tests/fixtures/hf/X.json --arm stock|plugin \\
        --model-dir /tmp/warmup-proof/models/X --out RUN_DIR [--dry-run]

The offline harness (bench/vllm_plugin_trace.py) builds ``vllm.LLM`` in its own process with
VLLM_ENABLE_V1_MULTIPROCESSING=0; users run the OpenAI server, where the API server and the engine
core are two processes and the worker's compiles happen where no harness can wrap them. This
driver starts the server exactly as the ``vllm`` console script does (vLLM 0.25.0's
entry_points.txt: ``vllm = vllm.entrypoints.cli.main:main``, run here as ``python3 -m
vllm.entrypoints.cli.main serve MODEL_DIR ...``), with vLLM's defaults (one API server, its
engine-core process; VLLM_ENABLE_V1_MULTIPROCESSING is removed from the environment), the offline
harness's LLM() arguments as flags (--load-format dummy, --skip-tokenizer-init, --max-model-len,
--gpu-memory-utilization, --seed, --tensor-parallel-size), and vLLM 0.25's own JIT monitor in
error mode: ``--jit-monitor-mode error`` (vllm/engine/arg_utils.py, ObservabilityConfig
.jit_monitor_mode; activated by Worker.compile_or_warm_up_model once warmup is done,
vllm/v1/worker/gpu_worker.py; a Triton or CuTeDSL compile after that raises in the worker, and
the requests it was serving fail).

Ready is the first HTTP 200 from GET /health, timed from time.time() just before Popen (the
server's interpreter start included). Then one completion alone (the first request's latency),
then the rest of --requests over /v1/completions from --concurrency threads to 127.0.0.1: token-id
prompts of mixed lengths (1-4000 tokens), mixed output lengths, and mixed sampling (greedy, top-p,
top-k, top-p with top-k, seeded, n of 2-4, min-p with a repetition penalty, logprobs, presence and
frequency penalties), the same list for both arms (seeded), bounded by --load-timeout and the
run's --time-limit. With --speculative-method, the kinds whose parameters vLLM 0.25 refuses under
speculative decoding (min_p, logit_bias: HTTP 400) are left out (result.json's kinds_left_out), the
request count unchanged. Each request's status and latency go to http_requests.jsonl; a non-200 (a 5xx
from the JIT monitor in error mode, or a refused connection once the engine is dead) is a failure.
With WARMUP_BUNDLE_OUT set (a bundle-build run), the driver then waits, within the run's deadline,
for the plugin's line that says the bundle was written or why not (result.json's bundle_out): the
bundle is packed in a daemon thread after ready, and the stop would end it unwritten.
Then the server's process group gets SIGINT (Ctrl-C, what vLLM's shutdown handles), then SIGKILL
after --stop-grace; leftover processes are recorded.

Its stdout and stderr are captured in server.log, each line (split at \\n and \\r, so that a tqdm
bar's updates count) prefixed with its arrival in seconds since the process start and out/err:
vLLM stamps its lines to the second only. The phases (weights, torch.compile, memory profile, CUDA
graphs, DeepGEMM warmup, init engine, the plugin's stages, ...) are read from those lines: a line
that says how long something took ends a phase of that length where it arrived; the rest lie
between two such lines (parse_log). KV cache: num_gpu_blocks and block_size from /metrics
(vllm:cache_config_info, vLLM's cache_config after the KV cache was sized), the token count from
the "GPU KV cache size" line. The arm's cache directories are listed at the start, at ready, after
the requests and after the stop: a file new after ready is a compile after ready that no monitor
saw (tensor-parallel ranks, DeepGEMM, FlashInfer).

result.json has the offline harness's keys where they mean the same (arm, process_start, ready_at,
ready_s, kv_cache, plugin_active, first_request_s, first_request_done_at, batches, trace_s,
compiles_after_ready, phases, plugin, ranks, rank_events_after_ready, cache_new_to_ready,
cache_new_after_ready, error), so that bench/vllm_startup_summary.py and
bench/plot_startup_timeline.py read both; and its own: mode "server", ready_source, server
(command, pid, rc, how it stopped, leftover pids), http (counts by status and kind, latencies,
failures), vllm_jit_monitor (what vLLM's monitor said: its activation line, every line after it),
log_events, cache_new_at_stop, kinds_left_out, bundle_out (with WARMUP_BUNDLE_OUT: path, outcome,
waited_s, line). compiles_after_ready counts what vLLM's JIT monitor reported after
ready (triton, cutedsl, triton_autotune) and torch.compile's log lines after ready; deep_gemm and
flashinfer stay None (vLLM's monitor does not watch them: the caches do).

--dry-run prints the server's command and environment changes, and runs nothing. Needs, besides
vLLM 0.25.0 with its server's dependencies (bench/vllm_gpu_setup.sh's py part), nothing beyond
the standard library; this repository on the path for the plugin arm's reports (vllm_bridge).
Written and tested here against a stand-in `vllm` package (tests/bench/test_vllm_serve_bench.py); its GPU
runs: bench/RESULTS.md, from part X.

Over 400 lines: a GPU driver carried to the device alone: the server's start, the HTTP trace of every sampling
kind, the JIT monitor's lines and the result file in one script.
"""

from __future__ import annotations

import time

SCRIPT_START = time.time()

import argparse  # noqa: E402
import collections  # noqa: E402
import concurrent.futures  # noqa: E402
import ctypes  # noqa: E402
import hashlib  # noqa: E402
import http.client  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # vllm_bridge, for the plugin's per-rank report paths (PYTHONPATH goes first)
    sys.path.append(REPO)
RESULT: dict = {}
REQUEST_PHASES: list = []  # the first request and the rest, timed here (the log's phases are parsed)
SERVER_ENTRY = "vllm.entrypoints.cli.main"  # what the `vllm` console script runs (vLLM 0.25.0)


def offline_harness():
    """bench/vllm_plugin_trace.py, for what both modes share: the cache listings and the plugin's
    reports (one definition, so the two modes count alike). Its import needs only the stdlib."""
    spec = importlib.util.spec_from_file_location("vllm_plugin_trace", os.path.join(HERE, "vllm_plugin_trace.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TRACE = offline_harness()


# --- the server process ------------------------------------------------------------------------------

def server_command(args, port: int | str) -> list[str]:
    """`vllm serve` with the offline harness's LLM() arguments as flags, and vLLM's JIT monitor."""
    return [args.python, "-m", SERVER_ENTRY, "serve", args.model_dir, "--host", "127.0.0.1", "--port", str(port),
            "--load-format", "dummy", "--skip-tokenizer-init", "--max-model-len", str(args.max_model_len),
            "--gpu-memory-utilization", str(args.gpu_memory_utilization), "--seed", str(args.seed),
            "--tensor-parallel-size", str(args.tensor_parallel_size), "--jit-monitor-mode", args.jit_monitor_mode,
            *(["--enable-expert-parallel"] if args.enable_expert_parallel else []),
            *(["--speculative-config", json.dumps(speculative_config(args), sort_keys=True)]
              if args.speculative_method else [])]


def speculative_config(args) -> dict | None:
    """vLLM's --speculative-config from the driver's flags, or None without speculative decoding."""
    if not args.speculative_method:
        return None
    return {"method": args.speculative_method, "num_speculative_tokens": args.num_speculative_tokens}


def server_env(arm: str) -> dict:
    """The caller's environment (the proof script set the arm's caches and WARMUP_*), less
    VLLM_ENABLE_V1_MULTIPROCESSING (vLLM's default: the engine core in a process of its own) and,
    in the stock arm, WARMUP_PLAN (the installed plugin then patches nothing)."""
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    if arm == "stock":
        env.pop("WARMUP_PLAN", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


try:
    LIBC = ctypes.CDLL(None)  # loaded before the fork: the child only calls it
except OSError:
    LIBC = None


def _in_own_group() -> None:
    """Runs in the child before exec: its own session (the whole server stops as one group), and
    SIGKILL if this driver dies (`timeout`'s SIGKILL must not leave a server holding the GPU; the
    proof script also kills the group it finds in server.pgid). SIGINT back to its default: a
    driver started in the background by a shell without job control (`cmd &`) inherits SIGINT
    ignored, and a server started ignoring it would ignore the SIGINT that stops it."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if LIBC is not None and hasattr(LIBC, "prctl"):
        LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_server(cmd: list[str], env: dict, log: "ServerLog") -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, preexec_fn=_in_own_group)
    log.follow(proc.stdout, "out")
    log.follow(proc.stderr, "err")
    return proc


class ServerLog:
    """The server's stdout and stderr, line by line, each stamped with its arrival (time.time()):
    in memory for parse_log, and in server.log as '<seconds since process start> out|err <line>'."""

    def __init__(self, path: str, t0: float):
        self.t0, self.lines, self.threads = t0, [], []
        self.lock = threading.Lock()
        self.file = open(path, "w", encoding="utf-8", buffering=1)

    def follow(self, pipe, stream: str) -> None:
        thread = threading.Thread(target=self._read, args=(pipe, stream), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _read(self, pipe, stream: str) -> None:
        pending = b""
        while chunk := os.read(pipe.fileno(), 65536):
            now = time.time()
            *complete, pending = re.split(rb"[\r\n]", pending + chunk)
            for raw in complete:
                if raw.strip():
                    self._add(now, stream, raw.decode("utf-8", "replace"))
        if pending.strip():
            self._add(time.time(), stream, pending.decode("utf-8", "replace"))

    def _add(self, t: float, stream: str, text: str) -> None:
        with self.lock:
            self.lines.append((t, stream, text))
            if not self.file.closed:
                self.file.write(f"{t - self.t0:9.3f} {stream} {text}\n")

    def snapshot(self) -> list:
        with self.lock:
            return list(self.lines)

    def close(self, timeout: float = 5.0) -> None:
        for thread in self.threads:
            thread.join(timeout)
        with self.lock:
            self.file.close()


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group (from /proc: no psutil needed), zombies left out."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # field 5 pgrp; field 3 state
            out.append(int(entry))
    return sorted(out)


def stop_server(proc: subprocess.Popen, grace: float) -> dict:
    """SIGINT to the server's group (Ctrl-C, which vLLM's API server and engine core shut down
    on), SIGKILL to what is left of the group after `grace` seconds; what it holds afterwards."""
    pgid = proc.pid  # the server's own session: its group is its pid
    out = {"pid": proc.pid, "signal": "SIGINT", "grace_s": grace, "group_at_stop": group_pids(pgid)}
    t = time.time()
    if proc.poll() is None:
        _signal_group(pgid, signal.SIGINT)
    else:
        out["signal"] = f"none: the server had exited (rc {proc.returncode})"
    while (proc.poll() is None or group_pids(pgid)) and time.time() < t + grace:  # the engine core too
        time.sleep(0.1)
    if proc.poll() is None or group_pids(pgid):
        out.update(signal=out["signal"] + ", then SIGKILL", killed=group_pids(pgid))
        _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.time() + 5.0
    while group_pids(pgid) and time.time() < deadline:  # SIGKILLed processes take a moment to go
        time.sleep(0.05)
    out.update(rc=proc.returncode, stopped_in_s=round(time.time() - t, 3), leftover_pids=group_pids(pgid))
    return out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- HTTP ----------------------------------------------------------------------------------------------

def call(port: int, method: str, path: str, body=None, timeout: float = 60.0) -> tuple[int, bytes]:
    """One request to 127.0.0.1 on a connection of its own: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_ready(proc: subprocess.Popen, port: int, deadline: float) -> tuple[float | None, str | None]:
    """(the time of the first 200 from GET /health, None), or (None, why not). vLLM binds its port
    early but listens only once the engine is up, so a refused connection means "not yet"."""
    while True:
        if proc.poll() is not None:
            return None, f"the server exited (rc {proc.returncode}) before /health answered 200"
        if time.time() > deadline:
            return None, "no 200 from /health before the run's deadline"
        try:
            status, _ = call(port, "GET", "/health", timeout=5.0)
        except (OSError, http.client.HTTPException):
            status = None
        if status == 200:
            return time.time(), None
        time.sleep(0.1)


# (kind, sampling parameters): every kind is sent about equally often, in a seeded order
SAMPLING = (("greedy", {"temperature": 0.0}),
            ("top-p", {"temperature": 0.8, "top_p": 0.9}),
            ("top-k", {"temperature": 1.0, "top_k": 50}),
            ("top-p+top-k", {"temperature": 0.7, "top_p": 0.95, "top_k": 20}),
            ("seeded", {"temperature": 0.9, "top_p": 0.95}),
            ("n>1", {"temperature": 0.8, "top_p": 0.9}),
            ("min-p+repetition", {"temperature": 0.7, "min_p": 0.05, "repetition_penalty": 1.1}),
            # no tokenizer (--skip-tokenizer-init): logprobs name their tokens by id
            ("logprobs", {"temperature": 0.9, "logprobs": 5, "return_tokens_as_token_ids": True}),
            ("penalties", {"temperature": 0.6, "presence_penalty": 0.5, "frequency_penalty": 0.5}),
            # temperature alone: with FlashInfer's sampler on, vLLM 0.25's V2 sampler takes Triton's Gumbel
            # path for it (FlashInfer's only where some request uses top-k/top-p and none is greedy or seeded)
            ("temperature", {"temperature": 0.6}))
# Issue 53: after the concurrent requests, one request of each kind alone in its batch, the last an n=2
# at temperature 0.6 (alone, it compiled vLLM's _gumbel_sample_kernel after ready on an odd vocabulary)
LAST_ALONE = ("n>1 alone", {"temperature": 0.6, "n": 2})


# vLLM 0.25 answers a request with either of these 400 when the server runs with --speculative-config
# ("The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."):
# a refusal by design, not an engine failure, so such kinds are left out of a speculative row's trace.
REFUSED_WITH_SPECULATIVE = ("min_p", "logit_bias")


def sampling_kinds(speculative: dict | None) -> tuple[tuple, dict]:
    """(the kinds of SAMPLING to send, {kind left out: why}): all of them without speculative
    decoding; with it, all but those whose parameters vLLM refuses (REFUSED_WITH_SPECULATIVE)."""
    if not speculative:
        return SAMPLING, {}
    used, left_out = [], {}
    for kind, params in SAMPLING:
        refused = [p for p in REFUSED_WITH_SPECULATIVE if p in params]
        if refused:
            left_out[kind] = (f"its {' and '.join(refused)}: vLLM refuses {' and '.join(REFUSED_WITH_SPECULATIVE)} "
                              "with speculative decoding (HTTP 400)")
        else:
            used.append((kind, params))
    return tuple(used), left_out


def completions(n: int, seed: int, model: str, max_model_len: int, kinds: tuple = SAMPLING) -> list[dict]:
    """The requests' bodies, the same list for a given seed and kinds: token-id prompts (lengths as
    the offline harness draws them, 1-4000 tokens), 1-64 new tokens, every kind of `kinds`."""
    rng = random.Random(seed)
    drawn = [kinds[i % len(kinds)] for i in range(n)]
    rng.shuffle(drawn)
    out = []
    for i, (kind, params) in enumerate(drawn):
        max_tokens = rng.randint(1, 64)
        length = int(min(4000, max_model_len - max_tokens, max(1, rng.lognormvariate(5.5, 1.2))))
        body = {"model": model, "prompt": [rng.randrange(100, 30000) for _ in range(length)],
                "max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True, **params}
        if kind == "seeded":
            body["seed"] = rng.randrange(2**31)
        if kind == "n>1":
            body["n"] = rng.randint(2, 4)
        out.append({"i": i, "kind": kind, "body": body})
    return out


def trace(n: int, seed: int, model: str, max_model_len: int, kinds: tuple = SAMPLING) -> list[dict]:
    """n requests: completions, then (where n leaves room for them) the ones sent alone."""
    tail = alone(0, seed, model, max_model_len, kinds)
    if n < len(tail) + 2:
        return completions(n, seed, model, max_model_len, kinds)
    head = completions(n - len(tail), seed, model, max_model_len, kinds)
    return head + [{**item, "i": len(head) + item["i"]} for item in tail]


def alone(start: int, seed: int, model: str, max_model_len: int, kinds: tuple = SAMPLING) -> list[dict]:
    """One request of each kind of `kinds`, then LAST_ALONE, each to be sent alone (the same list
    for a given seed and kinds): prompt lengths that are no multiple of 16, a few new tokens each."""
    rng = random.Random(seed + 1)
    out = []
    for i, (kind, params) in enumerate(tuple(kinds) + (LAST_ALONE,), start):
        length = min(max_model_len - 8, 16 * rng.randint(1, 60) + rng.randint(1, 15))
        body = {"model": model, "prompt": [rng.randrange(100, 30000) for _ in range(length)],
                "max_tokens": rng.randint(2, 8), "ignore_eos": True, "return_token_ids": True, **params}
        if kind == "seeded":
            body["seed"] = rng.randrange(2**31)
        if kind == "n>1":
            body["n"] = 2
        out.append({"i": i, "kind": kind, "alone": True, "body": body})
    return out


def send(port: int, item: dict, deadline: float, timeout: float) -> dict:
    """One completion: its status, latency and what came back (or why not)."""
    body = item["body"]
    rec = {"i": item["i"], "kind": item["kind"], "prompt_len": len(body["prompt"]), "max_tokens": body["max_tokens"],
           "n": body.get("n", 1), **({"alone": True} if item.get("alone") else {})}
    left = deadline - time.time()
    if left < 1.0:
        return {**rec, "status": None, "not_sent": True, "error": "not sent: the run's deadline"}
    t0 = time.time()
    try:
        status, data = call(port, "POST", "/v1/completions", body, timeout=min(timeout, left))
        error = None
    except (OSError, http.client.HTTPException) as e:
        status, data, error = None, b"", f"{type(e).__name__}: {e}"
    t1 = time.time()
    rec.update(start=round(t0, 4), end=round(t1, 4), latency_s=round(t1 - t0, 4), status=status)
    if status == 200:
        rec.update(returned(data))
    else:
        rec["error"] = error or data.decode("utf-8", "replace")[:500]
    return rec


def returned(data: bytes) -> dict:
    """Choices and generated tokens of a 200 (token_ids: return_token_ids is set)."""
    try:
        choices = json.loads(data).get("choices") or []
    except ValueError:
        return {"choices": None, "tokens": None}
    return {"choices": len(choices), "tokens": sum(len(c.get("token_ids") or []) for c in choices),
            "logprobs": any(c.get("logprobs") for c in choices),
            "token_ids_sha256": digest([c.get("token_ids") for c in choices])}


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


REPEATABLE = ("greedy", "seeded")  # kinds whose tokens a given engine repeats (a seeded request its seed's)


def greedy_alone(records: list[dict]) -> dict:
    """The tokens of the greedy and seeded requests sent alone, as one digest: each one is a batch
    of its own, so the same engine gives them the same tokens whatever ran before (a start-up
    setting that changes how processes start must not change them)."""
    lone = sorted((r for r in records if r.get("alone") and r["kind"] in REPEATABLE and r.get("status") == 200),
                  key=lambda r: r["i"])
    return {"requests": len(lone),
            "sha256": digest([r.get("token_ids_sha256") for r in lone]) if lone else None}


def run_requests(port: int, items: list[dict], concurrency: int, deadline: float, timeout: float) -> list[dict]:
    """The first request alone (its latency is the first request's), then the rest concurrently
    but those marked ``alone``, which go one at a time at the end."""
    together = [item for item in items[1:] if not item.get("alone")]
    records = [send(port, items[0], deadline, timeout)]
    with concurrent.futures.ThreadPoolExecutor(max(1, concurrency)) as pool:
        records += list(pool.map(lambda item: send(port, item, deadline, timeout), together))
    records += [send(port, item, deadline, timeout) for item in items[1:] if item.get("alone")]
    return records


def http_summary(records: list[dict]) -> dict:
    """What the requests got: counts by status and by kind, latencies of the 200s, the failures."""
    sent = [r for r in records if not r.get("not_sent")]
    ok = [r for r in sent if r["status"] == 200]
    failed = [r for r in sent if r["status"] != 200]
    by_kind: dict = {}
    for r in sent:
        row = by_kind.setdefault(r["kind"], {"sent": 0, "ok": 0})
        row["sent"] += 1
        row["ok"] += r["status"] == 200
    latencies = sorted(r["latency_s"] for r in ok)

    def pct(p: float):
        return latencies[min(len(latencies) - 1, int(len(latencies) * p))] if latencies else None

    return {"requests": len(records), "sent": len(sent), "ok": len(ok), "failed": len(failed),
            "not_sent": len(records) - len(sent),
            "by_status": dict(sorted(collections.Counter(str(r["status"]) for r in sent).items())),
            "by_kind": dict(sorted(by_kind.items())),
            "n": dict(sorted(collections.Counter(r["n"] for r in sent).items())),
            "latency_s": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
                          "max": latencies[-1] if latencies else None},
            "generated_tokens": sum(r.get("tokens") or 0 for r in ok), "greedy_alone": greedy_alone(sent),
            "failures": [{k: r.get(k) for k in ("i", "kind", "status", "latency_s", "error")} for r in failed[:10]]}


def metrics_kv(port: int) -> dict:
    """num_gpu_blocks and block_size from /metrics: vllm:cache_config_info's labels are vLLM's
    cache_config after the engine sized the KV cache (vllm/v1/metrics/loggers.py)."""
    try:
        status, data = call(port, "GET", "/metrics", timeout=10.0)
    except (OSError, http.client.HTTPException) as e:
        return {"source": f"/metrics: {type(e).__name__}"}
    for text in data.decode("utf-8", "replace").splitlines():
        if text.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', text))
            return {"num_gpu_blocks": _int(labels.get("num_gpu_blocks")), "block_size": _int(labels.get("block_size")),
                    "source": "/metrics vllm:cache_config_info"}
    return {"source": f"/metrics (status {status}): no vllm:cache_config_info"}


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def server_version(port: int):
    try:
        status, data = call(port, "GET", "/version", timeout=5.0)
        return json.loads(data).get("version") if status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None


# --- the server's log ----------------------------------------------------------------------------------

# A line that says how long something took: a phase of that length, ending where the line arrived.
ENDS = (("weights", r"Model loading took .*? and (?P<secs>[\d.]+) seconds"),
        ("torch.compile", r"torch\.compile took (?P<secs>[\d.]+) s in total"),
        ("torch.compile: Dynamo bytecode transform", r"Dynamo bytecode transform time: (?P<secs>[\d.]+) s"),
        ("torch.compile: graphs compiled", r"Compiling a graph for compile range .* takes (?P<secs>[\d.]+) s"),
        ("torch.compile: graphs loaded", r"Directly load the compiled graph\(s\) .* took (?P<secs>[\d.]+) s"),
        ("CUDA graphs", r"Graph capturing finished in (?P<secs>[\d.]+) secs"),
        ("init engine (profile, KV cache, warmup)",
         r"init engine \(profile, create kv cache, warmup model\) took (?P<secs>[\d.]+) s"),
        ("plugin plan", r"warmup-planner: plan \S+ ran: .*? in (?P<secs>[\d.]+) s"),
        ("plan: {stage}", r"warmup-planner: stage (?P<stage>[^:\s]+): .*, (?P<secs>[\d.]+) s\s*$"),
        ("plugin: vLLM {phase}", r"warmup-planner: vLLM (?P<phase>[^:]+): .*, (?P<secs>[\d.]+) s\s*$"))
# An instant: the line's arrival.
MARKS = (("model load start", r"Starting to load model"),
         ("KV cache memory", r"Available KV cache memory: (?P<gib>[\d.]+) GiB"),
         ("KV cache size", r"GPU KV cache size: (?P<tokens>[\d,]+) tokens"),
         ("max concurrency", r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x"),
         ("JIT monitor activated", r"Kernel JIT monitor activated.*?mode=(?P<mode>\w+)"),
         ("server listening", r"Starting vLLM server on"),
         ("startup complete", r"Application startup complete"),
         ("engine dead", r"EngineDeadError|EngineCore encountered a fatal error|Engine core .*died"),
         ("plugin", r"warmup-planner: "))
SPANS = (("DeepGEMM warmup", r"DeepGEMM warmup"),)  # first to last line (tqdm's bar)
# Between two marks (ENDS' phases end at marks named "<phase> end").
BETWEEN = (("engine start (imports, device)", "process start", "model load start"),
           ("memory profile", "weights end", "KV cache memory"),
           ("warmup (KV cache allocation, compile_or_warm_up_model)", "max concurrency", "JIT monitor activated"),
           ("API server up (app, uvicorn)", "init engine (profile, KV cache, warmup) end", "ready"))
# What vLLM's JIT monitor says (vllm/utils/jit_monitor.py), and Triton's autotuning print it turns on.
JIT_LINE = re.compile(r"(?P<backend>Triton|CuTeDSL) (?:kernel JIT compilation|JIT compilation) during inference: "
                      r"(?P<fn>[^\s.(]+)")
AUTOTUNE_LINE = re.compile(r"Triton autotuning for function (?P<fn>\w+)")
TORCH_COMPILE_LINE = re.compile(r"Compiling a graph for compile range|Dynamo bytecode transform time")


def parse_log(lines: list, process_start: float, ready_at: float | None) -> dict:
    """Phases (absolute times, as the offline harness writes them), marks and the JIT monitor's
    lines from the server's timed lines. A phase or mark is taken from its first line."""
    phases, marks, events, found = {}, {"process start": process_start}, [], {}
    spans: dict = {}
    for t, _, text in lines:
        for name, pattern in ENDS:
            if (m := re.search(pattern, text)) and (label := name.format(**m.groupdict())) not in phases:
                start = max(t - float(m["secs"]), process_start)  # rounded seconds may reach past it
                phases[label] = {"name": label, "start": round(start, 4), "end": round(t, 4)}
                marks.setdefault(f"{label} end", t)
                events.append({"t": round(t, 4), "what": label, "line": text[-300:]})
        for name, pattern in MARKS:
            if m := re.search(pattern, text):
                if name not in marks:
                    marks[name] = t
                    found[name] = {"t": round(t, 4), **m.groupdict()}
                events.append({"t": round(t, 4), "what": name, "line": text[-300:]})
        for name, pattern in SPANS:
            if re.search(pattern, text):
                spans.setdefault(name, [t, t])[1] = t
    if ready_at is not None:
        marks["ready"] = ready_at
    for name, (start, end) in spans.items():
        phases[name] = {"name": name, "start": round(start, 4), "end": round(end, 4)}
    for name, first, last in BETWEEN:
        if first in marks and last in marks and marks[first] <= marks[last]:
            phases.setdefault(name, {"name": name, "start": round(marks[first], 4), "end": round(marks[last], 4)})
    mode = (found.get("JIT monitor activated") or {}).get("mode")
    return {"phases": list(phases.values()), "marks": found, "events": events[:400],
            "monitor": jit_monitor(lines, ready_at, marks.get("JIT monitor activated"), mode)}


def jit_monitor(lines: list, ready_at: float | None, activated: float | None = None, mode: str | None = None) -> dict:
    """What vLLM's JIT monitor said: its activation, and every line it (or Triton's autotuning
    print) wrote, by kernel; 'after ready' = arrived after the first /health 200."""
    out = {"activated_at": activated, "mode": mode,
           "lines": [], "lines_after_ready": 0, "kernels_after_ready": [], "autotune_after_ready": 0,
           "torch_compile_lines_after_ready": 0}
    kernels = set()
    for t, stream, text in lines:
        after = ready_at is not None and t > ready_at
        jit, tune = JIT_LINE.search(text), AUTOTUNE_LINE.search(text)
        if after and TORCH_COMPILE_LINE.search(text):
            out["torch_compile_lines_after_ready"] += 1
        if not (jit or tune):
            continue
        if len(out["lines"]) < 50:
            out["lines"].append({"t_s": round(t - (ready_at or t), 3), "after_ready": after, "stream": stream,
                                 "line": text[-300:]})
        if after:
            out["lines_after_ready"] += 1
            if jit:
                kernels.add(f"{jit['backend']} {jit['fn']}")
            else:
                out["autotune_after_ready"] += 1
    out["kernels_after_ready"] = sorted(kernels)
    return out


def compiles_after_ready(monitor: dict) -> dict:
    """The offline harness's counts, from what vLLM's monitor and the log said after ready: each
    kernel once (in error mode its compile raises, and the error is logged more than once)."""
    kernels = monitor["kernels_after_ready"]
    return {"triton": sum(k.startswith("Triton ") for k in kernels),
            "cutedsl": sum(k.startswith("CuTeDSL ") for k in kernels),
            "triton_autotune": monitor["autotune_after_ready"], "deep_gemm": None,
            "torch_compile": monitor["torch_compile_lines_after_ready"], "flashinfer": None,
            "events": monitor["lines_after_ready"],
            "source": "vLLM's JIT monitor and torch.compile's lines in the server log"}


# --- the run -------------------------------------------------------------------------------------------

def write_result(out_dir: str) -> None:
    path = os.path.join(out_dir, "result.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULT, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def note_log(log: ServerLog) -> None:
    """The log's phases and JIT monitor lines so far, into RESULT (written at ready and at the end)."""
    parsed = parse_log(log.snapshot(), RESULT["process_start"], RESULT.get("ready_at"))
    whole = [{"name": "start to ready (first /health 200)", "start": round(RESULT["process_start"], 4),
              "end": round(RESULT["ready_at"], 4)}] if RESULT.get("ready_at") else []
    RESULT["phases"] = sorted(whole + parsed["phases"] + REQUEST_PHASES, key=lambda p: (p["start"], -p["end"]))
    RESULT["log_events"], RESULT["log_marks"] = parsed["events"], parsed["marks"]
    RESULT["vllm_jit_monitor"] = {"mode_requested": RESULT["jit_monitor_mode"], **parsed["monitor"]}
    if RESULT.get("ready_at"):
        RESULT["compiles_after_ready"] = compiles_after_ready(parsed["monitor"])
    marks = RESULT.get("log_marks") or {}
    kv = RESULT.setdefault("kv_cache", {})
    if "KV cache size" in marks:
        kv["kv_cache_size_tokens"] = int(marks["KV cache size"]["tokens"].replace(",", ""))
    if "max concurrency" in marks:
        kv["max_concurrency"] = float(marks["max concurrency"]["x"])
    init = next((p for p in parsed["phases"] if p["name"].startswith("init engine")), None)
    RESULT["init_engine_s"] = round(init["end"] - init["start"], 3) if init else None
    RESULT["plugin_lines"] = sum(e["what"] == "plugin" for e in parsed["events"])
    RESULT.update(generic_variants(parsed["events"]))


GENERIC_RUN = re.compile(r"warmup-planner: rank \d+: (?P<kernel>\S+) ran its generic Triton variant after ready")


def generic_variants(events: list) -> dict:
    """The plugin's generic Triton variants (executor/triton_generic.py): the kernels whose launches
    after ready ran one in place of a compile (a finding, no compile), and the line that says how
    many were built before ready."""
    runs = sorted({m["kernel"] for e in events if (m := GENERIC_RUN.search(e["line"]))})
    built = next((e["line"] for e in events if "generic Triton variants built" in e["line"]), None)
    return {"generic_variant_runs": runs, "generic_variants_line": built}


def plugin_active() -> bool:
    """Whether the plugin ran in the engine: its report, or its plan line in the log. (Offline, the
    harness looks at the Worker class itself; here the worker is another process.)"""
    plugin = RESULT.get("plugin") or {}
    planned = any(e["what"] == "plugin" and "warmup-planner: plan " in e["line"] for e in RESULT.get("log_events", []))
    return bool(plugin.get("found") and plugin.get("status")) or planned


def run(args) -> None:
    RESULT.update(mode="server", arm=args.arm, config=os.path.basename(args.config), argv=sys.argv,
                  script_start=SCRIPT_START, tensor_parallel_size=args.tensor_parallel_size,
                  enable_expert_parallel=args.enable_expert_parallel, speculative_config=speculative_config(args),
                  jit_monitor_mode=args.jit_monitor_mode, model_dir=args.model_dir,
                  env={k: os.environ.get(k) for k in (
                      "WARMUP_PLAN", "WARMUP_JOBS", "WARMUP_PLAN_REPORT", "WARMUP_JIT_LOG", "VLLM_PLUGINS",
                      "VLLM_CACHE_ROOT", "TRITON_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                      "DG_JIT_CACHE_DIR", "CUDA_CACHE_PATH", "VLLM_USE_FLASHINFER_SAMPLER",
                      "FLASHINFER_WORKSPACE_BASE", "TRTLLM_DG_CACHE_DIR", "VLLM_ENABLE_V1_MULTIPROCESSING",
                      "PYTHONPATH")})
    TRACE.model_dir(args.config, args.model_dir)
    port = args.port or free_port()
    cmd = server_command(args, port)
    caches = {"start": TRACE.cache_files()}
    log = ServerLog(os.path.join(args.out, "server.log"), time.time())
    deadline = SCRIPT_START + args.time_limit - args.reserve_s
    RESULT.update(server={"command": cmd, "port": port}, process_start=log.t0,
                  process_start_source="time.time() just before Popen of the server")
    proc = start_server(cmd, server_env(args.arm), log)
    RESULT["server"]["pid"] = proc.pid
    with open(os.path.join(args.out, "server.pgid"), "w") as f:  # its own session: group id = pid
        f.write(f"{proc.pid}\n")
    grace = min(args.stop_grace, 5.0)  # a failed or killed run: `timeout` SIGKILLs this driver 20 s on
    try:
        serve_and_measure(args, proc, port, log, caches, deadline)
        grace = args.stop_grace
    finally:
        RESULT["server"].update(stop_server(proc, grace))
        log.close()
        caches["stopped"] = TRACE.cache_files()
        if "end" in caches:  # what the shutdown itself wrote (not a compile after ready, but shown)
            RESULT["cache_new_at_stop"] = TRACE.new_cache_entries(caches["end"], caches["stopped"])
        elif "ready" in caches:  # cut short after ready: to the stop, the shutdown's files included
            RESULT["cache_new_after_ready"] = TRACE.new_cache_entries(caches["ready"], caches["stopped"])
        note_log(log)
        RESULT["finished_at"] = time.time()


def serve_and_measure(args, proc, port: int, log: ServerLog, caches: dict, deadline: float) -> None:
    ready, why = wait_ready(proc, port, deadline)
    if ready is None:
        raise RuntimeError(why)
    caches["ready"] = TRACE.cache_files()
    RESULT.update(ready_at=ready, ready_s=round(ready - RESULT["process_start"], 3),
                  ready_source="first 200 from GET /health",
                  llm_init_s=None, kv_cache=metrics_kv(port),
                  versions={"python": sys.version.split()[0], "vllm": server_version(port)},
                  cache_new_to_ready=TRACE.new_cache_entries(caches["start"], caches["ready"]),
                  plugin=TRACE.plugin_report(os.environ.get("WARMUP_PLAN_REPORT"), None))
    if args.arm == "plugin":
        RESULT["ranks"] = TRACE.rank_reports(args.tensor_parallel_size)
    note_log(log)
    RESULT["plugin_active"] = plugin_active()
    write_result(args.out)  # what start-up measured, before the requests (in case they hang)
    measure_requests(args, port, min(deadline, ready + args.load_timeout), log)
    caches["end"] = TRACE.cache_files()
    RESULT["cache_new_after_ready"] = TRACE.new_cache_entries(caches["ready"], caches["end"])
    if args.arm == "plugin":
        RESULT["rank_events_after_ready"] = TRACE.rank_events(args.tensor_parallel_size)
    RESULT["server_alive_after_requests"] = proc.poll() is None
    if os.environ.get("WARMUP_BUNDLE_OUT"):
        # The plugin packs the bundle in a daemon thread after ready; the stop's SIGINT, then SIGKILL
        # after --stop-grace, ends a bundle still being written (a DeepSeek-class one outlived both:
        # bench/RESULTS.md part AG): wait here for its outcome line, within the run's deadline.
        RESULT["bundle_out"] = wait_for_bundle(log, proc, os.environ["WARMUP_BUNDLE_OUT"], deadline)
        write_result(args.out)


# The bundle writer's one outcome line (vllm_bridge/bundles/writer.py; startup.py's line when the
# caches could not be recorded at load_model, in which case no writer starts and none other comes).
BUNDLE_WRITTEN = re.compile(r"warmup-planner: bundle (?P<path>\S+) written [\d.]+ s after ready")
BUNDLE_NOT_WRITTEN = re.compile(r"warmup-planner: (?:WARMUP_BUNDLE_OUT: )?no bundle (?:will be )?written")


def bundle_outcome(lines: list) -> tuple[str, str] | None:
    """("written" | "not written", the line) from the server's timed lines, or None before it came."""
    for _, _, text in lines:
        if BUNDLE_WRITTEN.search(text):
            return "written", text
        if BUNDLE_NOT_WRITTEN.search(text):
            return "not written", text
    return None


def wait_for_bundle(log: ServerLog, proc, path: str, deadline: float, poll_s: float = 0.5) -> dict:
    """Polls the server's log for the bundle's outcome line until it comes, the deadline passes,
    or the server has exited (then one more look a poll later: the log's readers may lag the exit)."""
    start, last_look = time.time(), False
    while True:
        found = bundle_outcome(log.snapshot())
        if found or last_look or time.time() >= deadline:
            break
        last_look = proc.poll() is not None
        time.sleep(max(0.0, min(poll_s, deadline - time.time())))
    exited = proc.poll() is not None
    outcome, line = found or (f"not seen: the server exited (rc {proc.returncode})" if exited
                              else "not seen before the deadline", None)
    return {"path": path, "outcome": outcome, "waited_s": round(time.time() - start, 3), "line": line}


def measure_requests(args, port: int, deadline: float, log: ServerLog) -> None:
    kinds, RESULT["kinds_left_out"] = sampling_kinds(speculative_config(args))
    items = trace(args.requests, args.seed, args.model_dir, args.max_model_len, kinds)
    start = time.time()
    records = run_requests(port, items, args.concurrency, deadline, args.request_timeout)
    end = time.time()
    with open(os.path.join(args.out, "http_requests.jsonl"), "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    first = records[0]
    together = [r for r in records[1:] if not r.get("alone")]
    lone = [r for r in records[1:] if r.get("alone")]
    RESULT.update(first_request_s=first.get("latency_s"), first_request_done_at=first.get("end"),
                  trace_s=round(end - start, 3), http=http_summary(records), engine_steps=None)
    phases = [({"name": "first request", "start": first.get("start", start), "end": first.get("end", start)},
               [first])]
    for name, group in ((f"HTTP requests ({len(together)}, {args.concurrency} at a time)", together),
                        (f"HTTP requests alone ({len(lone)}, one at a time)", lone)):
        sent = [r for r in group if "start" in r]
        if sent:
            phases.append(({"name": name, "start": min(r["start"] for r in sent),
                            "end": max(r["end"] for r in sent)}, group))
    REQUEST_PHASES[:] = [p for p, _ in phases]
    note_log(log)
    RESULT["batches"] = [batch(p, group, log) for p, group in phases]


def batch(phase: dict, records: list, log: ServerLog) -> dict:
    """The offline harness's batch row: wall, requests, tokens, and the JIT monitor's lines in it."""
    lines = [(t, s, x) for t, s, x in log.snapshot() if phase["start"] <= t <= phase["end"] + 1.0]
    monitor = jit_monitor(lines, phase["start"])
    return {"name": phase["name"], "requests": len(records), "wall_s": round(phase["end"] - phase["start"], 3),
            "ok": sum(r["status"] == 200 for r in records),
            "generated_tokens": sum(r.get("tokens") or 0 for r in records),
            "compiles": compiles_after_ready(monitor)}


def on_sigterm(signum, frame):  # `timeout` ends the run: the server is stopped, what was measured written
    raise SystemExit(f"killed by signal {signum} (the run's time limit)")


def dry_run(args) -> None:
    env = server_env(args.arm)
    changes = [f"-u {k}" for k in sorted(set(os.environ) - set(env))]
    print("+ (server, in the driver's environment) env " + " ".join(changes + ["PYTHONUNBUFFERED=1"]) + " "
          + shlex.join(server_command(args, "<a free port>")))
    kinds, left_out = sampling_kinds(speculative_config(args))
    print(f"+ (driver) wait for the first 200 from GET /health; then {args.requests} POST /v1/completions "
          f"({args.concurrency} at a time, kinds: {', '.join(k for k, _ in kinds)})"
          + "".join(f"; {kind} left out ({why})" for kind, why in left_out.items())
          + ("; then the bundle's outcome line (WARMUP_BUNDLE_OUT), until the deadline"
             if os.environ.get("WARMUP_BUNDLE_OUT") else "") + "; then SIGINT to the group")


DEFAULT_MAX_MODEL_LEN = 4096


def default_max_model_len(config_path: str) -> int:
    """4096, or the model's own limit where it is lower (vLLM refuses a longer --max-model-len)."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config = config.get("text_config", config)
    limit = config.get("max_position_embeddings")
    return min(DEFAULT_MAX_MODEL_LEN, int(limit)) if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_MODEL_LEN


def parse_args():
    """The driver's flags (the server's are built from them: server_command)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a Hugging Face config.json (tests/fixtures/hf/*.json)")
    parser.add_argument("--arm", choices=("stock", "plugin"), required=True)
    parser.add_argument("--out", required=True,
                        help="the run's directory: result.json, server.log, http_requests.jsonl, server.pgid")
    parser.add_argument("--model-dir", required=True,
                        help="the model directory to reuse (config.json copied there if missing)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="default: 4096, or the model's max_position_embeddings where fewer (vLLM refuses more)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--enable-expert-parallel", action="store_true",
                        help="vLLM's --enable-expert-parallel: the experts sharded over the TP ranks (EP = TP)")
    parser.add_argument("--speculative-method", default=None,
                        help="vLLM's speculative method (e.g. mtp, for a model with MTP layers): --speculative-config")
    parser.add_argument("--num-speculative-tokens", type=int, default=1)
    parser.add_argument("--jit-monitor-mode", choices=("error", "warn"), default="error",
                        help="vLLM's --jit-monitor-mode (error: a compile after warmup fails its requests)")
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    parser.add_argument("--python", default=sys.executable, help="the server's interpreter")
    parser.add_argument("--time-limit", type=float, default=560.0,
                        help="seconds this run may take from its start (the proof script's `timeout`)")
    parser.add_argument("--reserve-s", type=float, default=40.0,
                        help="of --time-limit, kept for stopping the server and writing the results")
    parser.add_argument("--load-timeout", type=float, default=240.0, help="the requests after ready, at most")
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument("--stop-grace", type=float, default=20.0, help="seconds from SIGINT to SIGKILL")
    parser.add_argument("--dry-run", action="store_true", help="print the server's command, run nothing")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests: at least 1 (the first request is timed alone)")
    if args.max_model_len is None:
        args.max_model_len = default_max_model_len(args.config)
    return args


def main() -> None:
    args = parse_args()
    if args.dry_run:
        dry_run(args)
        return
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        run(args)
    except BaseException as e:
        RESULT["error"] = f"{type(e).__name__}: {e}"
        RESULT["traceback"] = traceback.format_exc()[-4000:]
        RESULT["failed_at"] = time.time()
        write_result(args.out)
        raise
    write_result(args.out)
    print(summary_line(args))


def summary_line(args) -> str:
    """The run's one JSON line on stdout, for the proof script."""
    requests = RESULT.get("http") or {}
    return (json.dumps({"arm": args.arm, "mode": "server", "ready_s": RESULT.get("ready_s"),
                      "first_request_s": RESULT.get("first_request_s"), "http_ok": requests.get("ok"),
                      "http_failed": requests.get("failed"),
                      "kv_blocks": (RESULT.get("kv_cache") or {}).get("num_gpu_blocks"),
                      "compiles_after_ready": RESULT.get("compiles_after_ready"),
                      "cache_files_after_ready": (RESULT.get("cache_new_after_ready") or {}).get("files"),
                      "plugin_active": RESULT.get("plugin_active"),
                      "leftover_pids": RESULT["server"].get("leftover_pids")}))


if __name__ == "__main__":
    main()
