"""`warmup absorb` and `warmup check --logs` (issue 38): from the compiles a server logged after
ready to the plan that covers them, on the recorded vLLM 0.25.0 logs (tests/fixtures/logs)."""

import json
import os
import re
import resource
import subprocess
import sys
import tracemalloc
from types import SimpleNamespace as NS

import pytest

from planner import api
from planner.cli import main
from planner.errors import PlanError
from planner.plan.steps import Kernel
from planner.review import absorb
from planner.review.server_logs import Compile, read_log, read_logs

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "logs")
LLAMA_STOCK = os.path.join(FIXTURES, "vllm-0.25-llama-stock.server.log")
QWEN_STOCK = os.path.join(FIXTURES, "vllm-0.25-qwen3-moe-stock.server.log")
QWEN_PLUGIN = os.path.join(FIXTURES, "vllm-0.25-qwen3-moe-plugin.server.log")
NO_SAMPLER = os.path.join(FIXTURES, "vllm-0.25-plugin-no-sampler.yaml")
LLAMA, QWEN = "llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100"
MONITOR_TAIL = ". This causes a latency spike; consider extending warmup to cover this shape/config."


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def line_of(path, text):
    return next(i for i, line in enumerate(open(path, encoding="utf-8"), 1) if text in line)


def vllm_line(text, pid=3142, level="WARNING", stamp="11-27 03:46:47", where="jit_monitor.py:129"):
    return f"(EngineCore pid={pid}) {level} {stamp} [{where}] {text}\n"


ACTIVATED = vllm_line("Kernel JIT monitor activated; monitored JIT compilations during inference will use mode=warn.",
                      level="INFO", stamp="11-27 03:46:13", where="jit_monitor.py:73")


# --- reading the logs ----------------------------------------------------------------------------------

def test_stock_llama_log_has_the_sampler_kernel_after_ready():
    log = read_log(LLAMA_STOCK)
    assert (log.kind, log.vllm_version, log.monitor_modes) == ("vllm server log", "0.25.0", ("warn",))
    assert log.version_line == line_of(LLAMA_STOCK, "LLM engine (v0.25.0)")
    [c] = log.compiles
    assert (c.family, c.kernel, c.key, c.when, c.process, c.source) == (
        "Triton", "_topk_topp_kernel", None, "11-27 03:46:47", "EngineCore pid=3142", "vllm")
    assert c.line == line_of(LLAMA_STOCK, "during inference: _topk_topp_kernel")
    assert c.after_ready_s == pytest.approx(500.149 - 466.349)  # the harness's seconds, activation to line


def test_stock_qwen_log_has_sampler_and_fused_moe_and_the_plugin_run_none():
    assert [(c.family, c.kernel) for c in read_log(QWEN_STOCK).compiles] == [
        ("Triton", "_topk_topp_kernel"), ("Triton", "fused_moe_kernel")]
    plugin = read_log(QWEN_PLUGIN)
    assert (plugin.compiles, plugin.monitor_modes) == ((), ("error",))


def test_plain_vllm_lines_without_the_harness_prefix(tmp_path):
    """As `vllm serve` writes its log itself: the time after ready from vLLM's own stamps."""
    plain = tmp_path / "server.log"
    plain.write_text(re.sub(r"(?m)^\s*\d+\.\d+ (?:out|err) ", "", open(LLAMA_STOCK, encoding="utf-8").read()))
    [c] = read_log(str(plain)).compiles
    assert (c.kernel, c.after_ready_s) == ("_topk_topp_kernel", 34.0)  # 03:46:13 -> 03:46:47


def test_error_mode_repeats_count_once_per_process_and_each_family_is_read(tmp_path):
    error = "RuntimeError: Triton kernel JIT compilation during inference: _topk_topp_kernel" + MONITOR_TAIL
    log = tmp_path / "server.log"
    log.write_text(ACTIVATED + vllm_line(error, level="ERROR") + vllm_line(error, level="ERROR")
                   + vllm_line("CuTeDSL JIT compilation during inference: RouterGemm" + MONITOR_TAIL)
                   + vllm_line(error, pid=4000, level="ERROR"))
    compiles = read_log(str(log)).compiles
    assert [(c.family, c.kernel, c.process) for c in compiles] == [
        ("Triton", "_topk_topp_kernel", "EngineCore pid=3142"), ("CuTeDSL", "RouterGemm", "EngineCore pid=3142"),
        ("Triton", "_topk_topp_kernel", "EngineCore pid=4000")]


def test_verbose_detail_gives_key_and_constexprs(tmp_path):
    detail = ("constexprs={BLOCK_SIZE=8192, TOPK_ENABLED=True, TOPP_ENABLED=False, VOCAB_SIZE=128256}; "
              "signature={LOGITS=*fp32}; extra_compile_info={num_warps=4}; key=('[*fp32, i32]', 'x')")
    log = tmp_path / "server.log"
    log.write_text(ACTIVATED + vllm_line(f"Triton kernel JIT compilation during inference: _topk_topp_kernel "
                                         f"({detail}){MONITOR_TAIL}"))
    [c] = read_log(str(log)).compiles
    assert c.key == "('[*fp32, i32]', 'x')"
    assert dict(c.constants) == {"BLOCK_SIZE": "8192", "TOPK_ENABLED": "True", "TOPP_ENABLED": "False",
                                 "VOCAB_SIZE": "128256"}


def test_triton_autotuning_print_after_activation_only(tmp_path):
    """vLLM's monitor turns Triton's autotuning print on; a print before it is the warmup's own."""
    tune = ["(EngineCore pid=3142) Triton autotuning for function _w8a8_kernel,\n",
            "(EngineCore pid=3142) with key as (4096, 'torch.bfloat16'),\n",
            "(EngineCore pid=3142) finished after 1.20s,\n"]
    log = tmp_path / "server.log"
    log.write_text("".join(tune) + ACTIVATED + "".join(tune).replace("_w8a8", "_after"))
    [c] = read_log(str(log)).compiles
    assert (c.family, c.kernel, c.key) == ("Triton autotune", "_after_kernel", "(4096, 'torch.bfloat16')")


# --- the plugin's JIT log, as executor/jit_monitor.py writes it ------------------------------------------

class _Fn:
    name, module = "_my_unplanned_kernel", "mylib.kernels"


def plugin_jit_log(path):
    """Events written by the executor's own Monitor (its Triton, DeepGEMM, FlashInfer, torch.compile
    watchers' event shapes), sealed as the plugin seals it at ready."""
    from executor.caches.deep_gemm import DeepGemmWatcher
    from executor.caches.triton import TritonWatcher
    from executor.jit_monitor import Monitor

    monitor = Monitor("warn", str(path))
    monitor.sealed = True
    TritonWatcher(monitor).on_jit_miss({"fn": _Fn(), "key": "(['*fp32'], 'k')", "repr": "_my_unplanned_kernel[...]",
                                        "compile": {"constants": {"BLOCK": 64}}})
    monitor.post_seal(DeepGemmWatcher(monitor).event("sm90_fp8_gemm_1d2d.5b0c9e", "/cache/deep_gemm"))
    monitor.post_seal({"backend": "flashinfer", "event": "JIT module build", "kernel": "sampling"})
    monitor.post_seal({"backend": "torch.compile", "event": "dynamo compile", "kernel": "torch.compile frame"})
    return str(path)


def test_plugin_jit_log_each_backend_judged(tmp_path, capsys):
    log = plugin_jit_log(tmp_path / "plugin_jit.jsonl")
    code, out, err = run(capsys, "absorb", log, "--plan", "vllm-0.25-plugin", "--engine", LLAMA, "-f", "json")
    assert (code, err) == (0, "")
    got = {(c["family"], c["kernel"]): (c["status"], c["stage"], c["not_modelled"]) for c in json.loads(out)["compiles"]}
    assert got == {
        ("Triton", "_my_unplanned_kernel"): ("unknown", None, None),
        ("DeepGEMM", "sm90_fp8_gemm_1d2d"): ("covered", "deep_gemm_flashinfer", None),
        ("FlashInfer", "sampling"): ("covered", "flashinfer_jit", None),
        ("torch.compile", "torch.compile frame"): ("not modelled", None, "torch.compile warmup runs")}
    triton = json.loads(out)["compiles"][0]
    assert triton["key"] == "(['*fp32'], 'k')" and triton["when"].endswith("Z")


def test_plugin_warning_lines_are_read_only_without_its_jit_log(tmp_path):
    server = tmp_path / "server.log"
    server.write_text(ACTIVATED + vllm_line("deep_gemm JIT compilation after warmup was sealed: sm90_fp8_gemm_1d2d. "
                                            "This is a latency spike in serving; extend the warmup plan to cover it.",
                                            where="jit_monitor.py:500"))
    [alone] = read_logs([str(server)])
    assert [(c.family, c.kernel, c.source) for c in alone.compiles] == [("DeepGEMM", "sm90_fp8_gemm_1d2d", "plugin")]
    both = read_logs([str(server), plugin_jit_log(tmp_path / "jit.jsonl")])
    assert both[0].compiles == () and len(both[1].compiles) == 4


# --- absorb: verdicts, table, JSON, overlay ------------------------------------------------------------

def test_stock_qwen_against_the_mirror(moe_tables, capsys):
    code, out, err = run(capsys, "absorb", QWEN_STOCK, "--plan", "vllm-0.25", "--engine", QWEN)
    assert (code, err) == (0, "")
    assert "2 (1 covered, 1 absorb)" in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("Triton ")}
    assert "absorb: no stage of this plan warms it; stage sampler_kernels of vllm-0.25-plugin" in rows["_topk_topp_kernel"]
    assert "covered: stage fused_moe warms it" in rows["fused_moe_kernel"]
    assert "11-27 04:11:38" in rows["fused_moe_kernel"] and "41.7 s" in rows["fused_moe_kernel"]


def test_without_vllms_moe_tables_fused_moe_is_named_as_the_plan_names_it(capsys):
    code, out, _ = run(capsys, "absorb", QWEN_STOCK, "--plan", "vllm-0.25", "--engine", QWEN, "-f", "json")
    fused = json.loads(out)["compiles"][1]
    assert (code, fused["status"], fused["not_modelled"]) == (
        0, "not modelled", "Triton fused_moe (vLLM's tuned tables not found)")
    families = [g["family"] for g in api.expand(api.load_plan("vllm-0.25"), api.load_engine(QWEN)).not_modelled]
    assert fused["not_modelled"] in families  # named as `warmup plan -f table` lists it


def test_json_is_deterministic_and_counts(moe_tables, capsys):
    args = ("absorb", LLAMA_STOCK, QWEN_STOCK, "--plan", "vllm-0.25", "--engine", QWEN, "-f", "json")
    first, second = run(capsys, *args)[1], run(capsys, *args)[1]
    assert first == second
    data = json.loads(first)
    assert data["format"] == "warmup-absorb/v1" and [log["compiles"] for log in data["logs"]] == [1, 2]
    assert data["summary"] == {"compiles": 3, "covered": 1, "variant": 0, "absorb": 2, "not modelled": 0,
                               "unknown": 0}


def test_overlay_is_a_plan_that_diff_reviews_and_check_passes(moe_tables, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "absorb", QWEN_STOCK, "--plan", "vllm-0.25", "--engine", QWEN, "-o", "overlay.yaml")
    assert code == 0 and "review it with `warmup diff vllm-0.25 overlay.yaml --engine" in out
    plan = api.load_plan("overlay.yaml")
    assert plan.files[1].endswith("vllm-0.25.yaml")  # extends the release plan
    assert [(s.name, s.kind) for s in plan.stages][-1] == ("sampler_kernels", "vllm_sampler_kernels")
    assert "vLLM's Triton top-k/top-p sampler kernel" not in [g["family"] for g in plan.not_modelled]
    code, out, _ = run(capsys, "diff", "vllm-0.25", "overlay.yaml", "--engine", QWEN, "--no-color")
    assert code == 1 and "+ kernel _topk_topp_kernel" in out and "Plan: +1 step, -0 steps" in out
    assert run(capsys, "check", "vllm-0.25", "--engine", QWEN, "--logs", QWEN_STOCK)[0] == 1
    code, out, _ = run(capsys, "check", "overlay.yaml", "--engine", QWEN, "--logs", QWEN_STOCK)
    assert code == 0 and "(logs)" not in out
    # absorbing the same log again adds nothing: the overlay already covers it
    code, out, _ = run(capsys, "absorb", QWEN_STOCK, "--plan", "overlay.yaml", "--engine", QWEN, "-o", "again.yaml")
    assert "2 (2 covered)" in out
    assert [s.name for s in api.load_plan("again.yaml").stages] == [s.name for s in plan.stages]


def test_a_plan_that_leaves_a_stage_out(tmp_path, capsys):
    """The plugin's plan less its sampler stage: the overlay puts the stage back, extending that file."""
    out_dir = tmp_path / "review"
    out_dir.mkdir()
    overlay = out_dir / "overlay.yaml"
    code, out, _ = run(capsys, "absorb", LLAMA_STOCK, "--plan", NO_SAMPLER, "--engine", LLAMA, "-o", overlay)
    assert code == 0 and "stage sampler_kernels of vllm-0.25-plugin" in out
    assert os.path.samefile(api.load_plan(str(overlay)).files[1], NO_SAMPLER)
    near = tmp_path / "near.yaml"  # beside the overlay: named by its relative path
    near.write_text(open(NO_SAMPLER).read())
    run(capsys, "absorb", LLAMA_STOCK, "--plan", near, "--engine", LLAMA, "-o", overlay)
    assert 'extends: "../near.yaml"' in overlay.read_text()
    assert run(capsys, "check", NO_SAMPLER, "--engine", LLAMA, "--logs", LLAMA_STOCK)[0] == 1
    assert run(capsys, "check", str(overlay), "--engine", LLAMA, "--logs", LLAMA_STOCK)[0] == 0
    stages = [s.name for s in api.load_plan(str(overlay)).stages]  # the stage is back, appended
    assert sorted(stages) == sorted(s.name for s in api.load_plan("vllm-0.25-plugin").stages)


def test_check_names_the_log_line_and_fails_on_unknown_families(tmp_path, capsys):
    log = plugin_jit_log(tmp_path / "plugin_jit.jsonl")
    code, out, _ = run(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)
    assert code == 1
    assert f"ERROR E112 (logs): {log}:1: Triton _my_unplanned_kernel compiled after ready" in out
    assert f"WARNING W205 (logs): {log}:4: torch.compile torch.compile frame" in out
    assert "E112 log-miss-uncovered" in run(capsys, "check", "--list")[1]


def test_a_variant_the_stage_does_not_plan(tmp_path, capsys):
    def verbose(vocab):
        return vllm_line(f"Triton kernel JIT compilation during inference: _topk_topp_kernel (constexprs={{"
                         f"TOPK_ENABLED=True, TOPP_ENABLED=False, VOCAB_SIZE={vocab}}}; key=k){MONITOR_TAIL}")
    log = tmp_path / "server.log"
    log.write_text(ACTIVATED + verbose(128256) + verbose(32000))
    code, out, _ = run(capsys, "absorb", log, "--plan", "vllm-0.25-plugin", "--engine", LLAMA, "-f", "json")
    assert [c["status"] for c in json.loads(out)["compiles"]] == ["covered", "variant"]
    assert run(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)[0] == 1


def test_constants_agree_with_a_plan_key():
    key = "vllm.topk_topp[VOCAB_SIZE=151936 MASK_VALUE=-inf TOPK_ENABLED=1 TOPP_ENABLED=0](fp32 | B=i32)"
    assert absorb.constants_agree((("TOPK_ENABLED", "True"), ("VOCAB_SIZE", "151936")), key)
    assert not absorb.constants_agree((("TOPP_ENABLED", "True"),), key)
    assert absorb.constants_agree((("OTHER", "3"),), key)  # nothing shared: the key cannot tell


def test_vllm_033_families(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(vllm_line("Initializing a V1 LLM engine (v0.33.0) with config: model='m'", level="INFO")
                   + ACTIVATED + vllm_line("CuTeDSL JIT compilation during inference: RouterGemmKernel" + MONITOR_TAIL)
                   + vllm_line("TileLang JIT compilation during inference: sparse_mla_fwd" + MONITOR_TAIL))
    code, out, _ = run(capsys, "absorb", log, "--plan", "vllm-0.33", "--engine", LLAMA, "-f", "json")
    got = [(c["family"], c["status"], c["not_modelled"]) for c in json.loads(out)["compiles"]]
    assert got == [("CuTeDSL", "not modelled", "low-latency BF16 router GEMM (CuTeDSL, M = 1..16)"),
                   ("TileLang", "unknown", None)]


# --- bad input: one line, exit 2, file and line named --------------------------------------------------

def bad(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("make, expected", [
    (lambda d: str(d / "missing.log"), r"missing\.log: no such file"),
    (lambda d: str(d), r": is a directory"),
    (lambda d: bad(d, "core.log", b"INFO ok\n\x7fELF\x02\x01\x00\x00garbage\n"), r"core\.log:2: binary data"),
    (lambda d: bad(d, "log.gz", b"\x1f\x8b\x08\x00rest"), r"log\.gz: gzip-compressed"),
    (lambda d: bad(d, "cut.log", ACTIVATED.encode() + vllm_line(
        "Triton kernel JIT compilation during inference: _topk_to").encode()), r"cut\.log:2: vLLM's JIT-monitor line is cut off"),
    (lambda d: bad(d, "jit.jsonl", b'{"backend": "triton", "kernel": "k"}\n{"backend": "tri'),
     r"jit\.jsonl:2: not a JSON line of the plugin's JIT log \(cut short\?\)"),
    (lambda d: bad(d, "jit2.jsonl", b'{"backend": "triton"}\n'), r"jit2\.jsonl:1: a line of the plugin's JIT log without"),
    (lambda d: bad(d, "latin.log", ACTIVATED.encode() + b"Triton kernel JIT compilation during inference: \xe9t"),
     r"latin\.log:2: not UTF-8 text"),
    (lambda d: bad(d, "v033.log", vllm_line("Initializing a V1 LLM engine (v0.33.0) with config", level="INFO").encode()),
     r"v033\.log:1: vLLM 0\.33\.0 wrote this log, and the plan mirrors vLLM 0\.25\.0"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, make, expected):
    code, out, err = run(capsys, "absorb", make(tmp_path), "--plan", "vllm-0.25", "--engine", LLAMA)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and re.search(expected, err), err
    assert "Traceback" not in err


def test_a_vllm_log_with_nothing_after_ready_has_nothing(tmp_path, capsys):
    log = bad(tmp_path, "quiet.log", ACTIVATED.encode() + b"[nginx] GET / 200\n" * 50)
    code, out, _ = run(capsys, "absorb", log, "--plan", "vllm-0.25", "--engine", LLAMA)
    assert code == 0 and "Nothing compiled after ready." in out


# --- a file that is no vLLM log is an error, not a pass (issue 44 item 5) ---------------------------------

NOT_A_LOG = "no line of vLLM's logger (\"LEVEL MM-DD HH:MM:SS [FILE:LINE] MESSAGE\") and no JSON line of the plugin's"


@pytest.mark.parametrize("make, expected", [
    (lambda d: bad(d, "empty.log", b""), "empty (no line but blank ones)"),
    (lambda d: bad(d, "blank.log", b"\n  \n\r\n"), "empty (no line but blank ones)"),
    (lambda d: os.path.abspath("README.md"), NOT_A_LOG),
    (lambda d: bad(d, "noise.log", b"\n".join([b"[nginx] GET / 200", "█▄ progress 100%|██".encode(), b""] * 50)),
     NOT_A_LOG),
    (lambda d: bad(d, "almost.log", b"INFO 11-27 03:46:13 core.py:73 no brackets\nWARNING the monitor said: "
                                    b"Triton kernel JIT compilation during inference: k. This causes a latency "
                                    b"spike\n"), NOT_A_LOG),
])
@pytest.mark.parametrize("command", ["absorb", "check"])
def test_a_file_with_no_line_of_vllm_is_an_error_naming_it(tmp_path, capsys, make, expected, command):
    path = make(tmp_path)
    argv = (["absorb", path, "--plan", "vllm-0.25"] if command == "absorb" else
            ["check", "vllm-0.25", "--logs", LLAMA_STOCK, path])
    code, out, err = run(capsys, *argv, "--engine", LLAMA)
    assert (code, out) == (2, "")
    assert err.startswith(f"warmup: error: {path}: {expected}") and err.count("\n") == 1, err


@pytest.mark.parametrize("line", [
    # vLLM 0.33: its process name first; 0.25 through a harness; a VLLM_LOGGING_PREFIX; in color
    "(EngineCore_DP0 pid=7) INFO 11-28 04:21:46 [core.py:114] Initializing a V1 LLM engine (v0.25.0)\n",
    "   12.5 err (APIServer pid=8) DEBUG 01-02 03:04:05 [v1/.../core.py:9] anything\n",
    "[node-3] WARNING 11-28 04:21:46 [api_server.py:1] anything\n",
    ("\x1b[0;36m(EngineCore_DP0 pid=7)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-28 04:21:46\x1b[0m "
     "\x1b[90m[core.py:114]\x1b[0m anything\n"),
])
def test_one_line_of_vllms_logger_makes_a_server_log(tmp_path, line):
    path = tmp_path / "server.log"
    path.write_text("noise\n" + line + "more noise\n")
    assert read_log(str(path)).kind == "vllm server log"


def test_a_log_in_color_is_read_as_in_plain_text(tmp_path):
    grey, green, yellow, cyan, reset = "\x1b[90m", "\x1b[32m", "\x1b[33m", "\x1b[0;36m", "\x1b[0m"

    def colored(line):  # vLLM's ColoredFormatter: the process, level, time and [file:line] wrapped
        proc, level, day, hms, where, rest = re.match(r"(\(.*?\)) (\w+) (\S+) (\S+) (\[.*?\]) (.*)", line,
                                                     re.DOTALL).groups()
        color = green if level == "INFO" else yellow
        return (f"{cyan}{proc}\x1b[0;0m {color}{level}{reset} {grey}{day} {hms}{reset} {grey}{where}{reset} "
                f"{rest}")

    monitor = vllm_line(f"Triton kernel JIT compilation during inference: _topk_topp_kernel{MONITOR_TAIL}")
    plain, painted = tmp_path / "plain.log", tmp_path / "painted.log"
    plain.write_text(ACTIVATED + monitor)
    painted.write_text(colored(ACTIVATED) + colored(monitor))
    [c] = read_log(str(painted)).compiles
    assert c == read_log(str(plain)).compiles[0]._replace(file=str(painted))
    assert (c.when, c.after_ready_s, c.process) == ("11-27 03:46:47", 34.0, "EngineCore pid=3142")


# --- logs are read a line at a time: memory bounded whatever their size (issue 44 item 5) ------------------

MEMORY_BOUND = 8 << 20  # a few lines of MAX_LINE_BYTES (1 MiB); the logs below are 32 MiB


def peak_bytes_reading(path) -> int:
    """The most memory Python held while read_log read `path` (tracemalloc: allocations, not RSS)."""
    tracemalloc.start()
    try:
        try:
            read_log(str(path))
        except PlanError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_big_log_is_not_held_in_memory(tmp_path):
    path = tmp_path / "big.log"
    noise = vllm_line("GET /v1/completions 200 OK " + "x" * 100, level="INFO").encode()
    with open(path, "wb") as f:
        f.write(ACTIVATED.encode())
        f.writelines(noise * ((1 << 20) // len(noise)) for _ in range(32))  # 32 MiB of request lines
        f.write(vllm_line(f"Triton kernel JIT compilation during inference: _topk_topp_kernel{MONITOR_TAIL}")
                .encode())
    assert [c.kernel for c in read_log(str(path)).compiles] == ["_topk_topp_kernel"]
    assert peak_bytes_reading(path) < MEMORY_BOUND


def test_a_file_without_newlines_is_read_a_bounded_piece_at_a_time(tmp_path):
    path = tmp_path / "one-line.log"
    path.write_bytes(b"x" * (32 << 20))
    assert peak_bytes_reading(path) < MEMORY_BOUND


def test_an_over_long_line_is_cut_and_the_lines_after_it_counted(tmp_path):
    path = tmp_path / "long.log"
    monitor = vllm_line(f"Triton kernel JIT compilation during inference: _topk_topp_kernel{MONITOR_TAIL}")
    path.write_bytes(ACTIVATED.encode() + vllm_line("tensor(" + "1, " * (1 << 20) + ")").encode()
                     + monitor.encode())
    [c] = read_log(str(path)).compiles
    assert (c.kernel, c.line) == ("_topk_topp_kernel", 3)


def test_dev_zero_is_binary_data_in_bounded_memory():
    """/dev/zero never ends and has no newline: one bounded line is read, and it is binary."""
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run([sys.executable, "-m", "planner.cli", "absorb", "/dev/zero", "--plan", "vllm-0.25",
                           "--engine", LLAMA], capture_output=True, text=True, timeout=120, preexec_fn=limit_memory,
                          check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "warmup: error: /dev/zero:1: binary data (NUL byte), expected a vLLM server log or a " \
                          "WARMUP_JIT_LOG file\n"


def test_read_logs_refuses_a_mismatch_in_the_library_too():
    with pytest.raises(PlanError, match="vLLM 0.25.0 wrote this log"):
        read_logs([LLAMA_STOCK], "0.33.0")


# --- classify and overlay, rule by rule (issue 44 item 7) ----------------------------------------------

def compile_of(family, kernel, constants=()):
    return Compile(family, kernel, None, "11-27 03:46:47", 34.0, "server.log", 7, "vllm", "kernel JIT compilation",
                   "EngineCore pid=3142", constants)


def plan_of(steps=(), not_modelled=()):
    """An expanded plan as classify reads it: its name, its steps, its not-modelled list."""
    return NS(plan="my-plan", steps=list(steps), not_modelled=list(not_modelled))


def gap(family, why="not planned"):
    return {"family": family, "why": why, "action": "none"}


def verdict(compile_, gaps):
    [miss] = absorb.classify([compile_], plan_of(not_modelled=gaps))
    return miss.status, miss.not_modelled


# --- covered, variant ---------------------------------------------------------------------------------------

def sampler_step():
    expanded = api.expand(api.load_plan("vllm-0.25-plugin"), api.load_engine(LLAMA))
    return next(s for s in expanded.steps if isinstance(s, Kernel) and s.kernel == "_topk_topp_kernel")


def test_a_variant_no_stage_plans_is_named_after_the_first_stage_that_warms_the_kernel():
    step = sampler_step()
    first, second = step.replace(stage="sampler_kernels"), step.replace(stage="sampler_again")
    compile_ = compile_of("Triton", "_topk_topp_kernel", (("VOCAB_SIZE", "32000"),))
    [miss] = absorb.classify([compile_], plan_of([first, second]))
    assert (miss.status, miss.stage) == ("variant", "sampler_kernels")


def test_a_kernel_another_plan_warms_is_absorbed_from_the_first_stage_of_it_that_does():
    cover = absorb.Coverage("vllm-0.25-plugin", {("Triton", "_k"): [("first_stage", ()), ("second_stage", ())]})
    other = NS(name="vllm-0.25-plugin", stages=[NS(name="second_stage", kind="kernel"),
                                                  NS(name="first_stage", kind="vllm_sampler_kernels")])
    [miss] = absorb.classify([compile_of("Triton", "_k")], plan_of(), catalog=lambda: [(other, cover)])
    assert (miss.status, miss.stage, miss.stage_plan, miss.stage_kind) == (
        "absorb", "first_stage", "vllm-0.25-plugin", "vllm_sampler_kernels")


# --- not modelled: which entry names a compile -----------------------------------------------------------

def test_a_kernel_stem_of_four_letters_or_more_names_a_family_and_one_of_three_does_not():
    """`_rope_kernel` is named by an entry about rope; `_moe_kernel`'s stem is too short to tell."""
    assert verdict(compile_of("Triton", "_rope_kernel"), [gap("Triton rope for long contexts")]) == (
        "not modelled", "Triton rope for long contexts")
    assert verdict(compile_of("Triton", "_moe_kernel"), [gap("Triton moe for small experts")]) == ("unknown", None)


def test_triton_autotune_is_named_by_an_entry_about_triton():
    """Triton autotune is a family no stage kind models: an entry whose family names Triton names it."""
    assert verdict(compile_of("Triton autotune", "_w8a8_block_kernel"), [gap("Triton kernels of custom ops")]) == (
        "not modelled", "Triton kernels of custom ops")


def test_an_entry_whose_family_starts_with_the_logs_family_is_preferred():
    gaps = [gap("CUTLASS fallback for fused_moe_kernel"), gap("Triton fused_moe_kernel off the tuned tables")]
    assert verdict(compile_of("Triton autotune", "fused_moe_kernel"), gaps) == (
        "not modelled", "Triton fused_moe_kernel off the tuned tables")


# --- the catalog: the release's other plans -------------------------------------------------------------------

def test_the_catalog_is_the_releases_other_plans_and_none_without_a_release():
    release = api.load_plan("vllm-0.25").vllm_release
    names = [p.name for p in absorb.release_plans("vllm-0.25", release)]
    assert "vllm-0.25" not in names and "vllm-0.25-plugin" in names
    assert all(api.load_plan(n).vllm_release == release for n in names)
    assert absorb.release_plans("vllm-0.25", None) == []


# --- the overlay ---------------------------------------------------------------------------------------------

def absorbed(stage, plan="vllm-0.25-plugin", kernel="fused_moe_kernel"):
    return absorb.Miss(compile_of("Triton", kernel), absorb.ABSORB, stage, plan, None, None, "absorbed")


def my_plan(name="my-plan", stages=()):
    return NS(name=name, vllm_release=api.load_plan("vllm-0.25").vllm_release, stages=[NS(name=s) for s in stages],
              not_modelled=[])


def test_an_absorbed_stage_keeps_its_condition_and_the_parameters_its_plan_wrote():
    plan = my_plan()
    layer = absorb.overlay(plan, [absorbed("fused_moe")], "my-plan.yaml")
    doc = absorb.overlay_document(layer, plan, ["server.log"])
    [entry] = doc["stages"]
    assert entry["when"] == "device_capability == 90"
    assert entry["with"] == {"max_tokens": "max_num_batched_tokens"}  # `when` is the stage's, not a parameter
    assert set(entry) == {"name", "kind", "description", "when", "with"}
    sampler = absorb.overlay_document(absorb.overlay(plan, [absorbed("sampler_kernels")], "p"), plan, ["s.log"])
    assert "when" not in sampler["stages"][0]  # a stage that always runs says nothing


def test_two_absorbed_stages_of_one_name_get_names_of_their_own():
    plan = my_plan()
    layer = absorb.overlay(plan, [absorbed("fused_moe", "vllm-0.25"), absorbed("fused_moe", "vllm-0.25-plugin")], "p")
    assert [stage.name for stage, _ in layer.stages] == ["fused_moe", "absorbed-fused_moe"]


def test_the_overlays_names_are_cut_to_the_schemas_64_characters():
    long = "p" * 60
    layer = absorb.overlay(my_plan(long), [], "p")
    assert layer.name == (long + "-absorbed")[:64] and len(layer.name) == 64


def test_an_absorbed_stage_renamed_for_a_clash_is_cut_to_64_characters(monkeypatch):
    source = api.load_plan("vllm-0.25-plugin")
    long_stage = source.stages[0]._replace(name="s" * 60)
    monkeypatch.setattr(absorb, "release_plans", lambda name, release: [NS(name="src", stages=[long_stage])])
    layer = absorb.overlay(my_plan(stages=["s" * 60]), [absorbed("s" * 60, plan="src")], "p")
    [(stage, _)] = layer.stages
    assert stage.name == ("absorbed-" + "s" * 60)[:64] and len(stage.name) == 64


def test_the_overlay_loads_as_a_plan(tmp_path):
    """The document with a stage that has a condition and parameters is a plan the planner takes."""
    import yaml

    plan = api.load_plan("vllm-0.25")
    misses = [absorbed("fused_moe")]
    layer = absorb.overlay(NS(name="mine", vllm_release=plan.vllm_release, stages=[], not_modelled=[]), misses,
                           "vllm-0.25")
    doc = absorb.overlay_document(layer._replace(extends="vllm-0.25"), plan, ["server.log"])
    doc["stages"][0]["name"] = "fused_moe_again"
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = api.load_plan(str(path))
    stage = next(s for s in loaded.stages if s.name == "fused_moe_again")
    assert stage.when == "device_capability == 90" and stage.params["max_tokens"] == "max_num_batched_tokens"


def test_a_parent_plan_file_without_a_yaml_suffix_is_named_as_a_path_not_a_plan_name(tmp_path):
    """`extends: myplan` would name a built-in plan; the file beside the overlay is `./myplan`."""
    parent = tmp_path / "myplan"
    parent.write_text("")
    assert absorb.extends_ref(str(parent), str(parent), str(tmp_path / "overlay.yaml")) == "./myplan"
    assert absorb.extends_ref("vllm-0.25", "ignored", str(tmp_path / "overlay.yaml")) == "vllm-0.25"
