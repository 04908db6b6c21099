"""The JIT monitor: per-step counts, the seal, warn/error after it, the JSONL log, and that it
restores the hooks it chained. The Triton hooks are driven the way Triton 3.6 calls them
(triton/runtime/jit.py `_call_hook`, compiler.py listener, CompiledKernel._init_handles). DeepGEMM
is faked: a module in sys.modules and a temporary DG_JIT_CACHE_DIR laid out as DeepGEMM 2.x lays
it out (cache/kernel.<name>.<hash>/ with kernel.cu and kernel.cubin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import ModuleType, SimpleNamespace

import pytest
from execlib import ROOT

from executor import jit_monitor
from executor.caches import deep_gemm, torch_compile
from executor.jit_monitor import JitAfterSealError, Monitor
from planner.hashing import digest

knobs = pytest.importorskip("triton").knobs


def fire_jit_miss(name="fp8_gemm_kernel", key="[('*fp8e4nv','D'),('i32','')]", warmup=False):
    """What JITFunction._do_compile does on an in-memory miss, then the compile and the launch."""
    fn = SimpleNamespace(module="executor.kernels.fp8_gemm", name=name, jit_function=None)
    info = {"key": key, "signature": {"M": "i32"}, "constants": {"BLOCK_SIZE_M": 64}, "num_warps": 4,
            "num_stages": 3, "specialization_data": '{"name": "%s"}' % name}
    knobs.runtime.jit_cache_hook(key=key, repr=f"{name}[num_warps=4]", fn=fn, compile=info,
                                 is_manual_warmup=warmup, already_compiled=False)
    knobs.compilation.listener(src=None, metadata={"name": name}, metadata_group={},
                               times=SimpleNamespace(total=1500), cache_hit=False)
    knobs.runtime.jit_post_compile_hook(key=key, repr="", fn=fn, compile=info, is_manual_warmup=warmup,
                                        already_compiled=False)
    if not warmup:
        knobs.runtime.kernel_load_start_hook(None, None, name, {}, "hash")


@pytest.fixture
def monitor(tmp_path):
    m = Monitor("warn", str(tmp_path / "misses.jsonl")).install()
    yield m
    m.uninstall()


def test_counts_per_step_before_the_seal(monitor):
    monitor.begin_step("a")
    fire_jit_miss()
    knobs.compilation.listener(src=None, metadata={"name": "k2"}, metadata_group={}, times=None, cache_hit=True)
    counts = monitor.end_step()
    assert (counts.jit_misses, counts.compiled, counts.disk_loads, counts.module_loads) == (1, 1, 1, 1)
    assert counts.kernels == {"fp8_gemm_kernel": 1} and counts.compile_ms == pytest.approx(1.5)
    monitor.begin_step("b")
    assert monitor.end_step().jit_misses == 0
    assert monitor.totals.jit_misses == 1 and monitor.post_seal_events == []


def jit_compile(name, key, src=None, hit=False):
    """A @triton.jit miss as Triton 3.6 reports it: the cache hook, triton.compile's listener (a compile,
    or a load from the disk cache), the post-compile hook."""
    fn = SimpleNamespace(module="vllm.v1.sample.ops.topk_topp_triton", name=name, jit_function=None)
    info = {"key": key, "signature": {}, "constants": {}, "num_warps": 4, "num_stages": 3}
    knobs.runtime.jit_cache_hook(key=key, repr=name, fn=fn, compile=info, is_manual_warmup=True,
                                 already_compiled=False)
    knobs.compilation.listener(src=src, metadata={"name": name, "hash": key}, metadata_group={}, times=None,
                               cache_hit=hit)
    knobs.runtime.jit_post_compile_hook(key=key, repr=name, fn=fn, compile=info, is_manual_warmup=True,
                                        already_compiled=False)


def test_the_summary_keeps_the_key_parts_of_what_compiled_not_of_what_loaded(monitor):
    """Parts AN and AO: a warm start compiled @triton.jit kernels a cold start had put on disk. For each
    such compile the report keeps Triton's key and the digest of the kernel's own part (``src.hash()``),
    so that the cold start's and the warm start's can be compared part by part; a disk load adds
    nothing, and neither does a compile outside a @jit miss (Inductor's: hundreds on a cold start)."""
    src = SimpleNamespace(hash=lambda: "the kernel's source, specialization and constexprs")
    jit_compile("_topk_topp_kernel", "abc", src)
    jit_compile("loaded", "def", src, hit=True)
    jit_compile("from_ir", "ghi")
    knobs.compilation.listener(src=src, metadata={"name": "triton_poi_fused_0", "hash": "jkl"}, metadata_group={},
                               times=None, cache_hit=False)
    assert monitor.summary()["details"]["triton"]["compiled_keys"] == [
        {"kernel": "_topk_topp_kernel", "key": "abc",
         "source": digest("the kernel's source, specialization and constexprs")},
        {"kernel": "from_ir", "key": "ghi", "source": None}]


def test_a_compiles_key_parts_name_the_environment_triton_hashed_where_there_was_one(monitor, monkeypatch):
    libtriton = SimpleNamespace(get_cache_invalidating_env_vars=lambda: {"TRITON_F32_DEFAULT": "ieee"})
    monkeypatch.setitem(sys.modules, "triton._C.libtriton", libtriton)
    jit_compile("k", "abc")
    assert monitor.summary()["details"]["triton"]["compiled_keys"] == [
        {"kernel": "k", "key": "abc", "source": None, "env": {"TRITON_F32_DEFAULT": "ieee"}}]


def test_a_summary_without_compiles_has_no_details(monitor):
    jit_compile("loaded", "def", hit=True)
    assert "details" not in monitor.summary()


def test_after_seal_warn_reports_and_logs(monitor, tmp_path, caplog):
    monitor.seal()
    monitor.begin_step("verify/gemm/m17")
    with caplog.at_level("WARNING", logger="executor.jit_monitor"):
        fire_jit_miss(name="late_kernel")
    monitor.end_step()
    assert len(monitor.post_seal_events) == 1  # the compile and its module load are one event
    event = monitor.post_seal_events[0]
    assert event["kernel"] == "late_kernel" and event["step"] == "verify/gemm/m17"
    assert event["constants"] == {"BLOCK_SIZE_M": 64} and "late_kernel" in event["specialization_data"]
    assert "late_kernel" in caplog.text and "after warmup was sealed" in caplog.text
    lines = (tmp_path / "misses.jsonl").read_text().splitlines()
    assert [json.loads(line)["kernel"] for line in lines] == ["late_kernel"]
    assert monitor.after_seal.jit_misses == 1 and monitor.totals.jit_misses == 0


def test_after_seal_error_raises(tmp_path):
    m = Monitor("error").install()
    try:
        m.seal()
        with pytest.raises(JitAfterSealError, match="late_kernel"):
            fire_jit_miss(name="late_kernel")
        assert len(m.post_seal_events) == 1
    finally:
        m.uninstall()


def test_module_load_of_an_unlaunched_variant_is_reported(monitor):
    monitor.seal()
    knobs.runtime.kernel_load_start_hook(None, None, "preloaded_kernel", {}, "h")
    assert [e["kernel"] for e in monitor.post_seal_events] == ["preloaded_kernel"]


def test_inductor_compile_outside_jit_is_reported(monitor):
    monitor.seal()
    knobs.compilation.listener(src=None, metadata={"name": "triton_poi_fused"}, metadata_group={},
                               times=None, cache_hit=False)
    assert monitor.post_seal_events[0]["kernel"] == "triton_poi_fused"


def test_uninstall_restores_and_chains_previous_hooks():
    seen = []
    prev = lambda **kw: seen.append(kw["key"])  # noqa: E731
    knobs.runtime.jit_cache_hook = prev
    load_hooks = list(knobs.runtime.kernel_load_start_hook.calls)
    listener = knobs.compilation.listener  # another test's sealed monitor may hold it: restored, not cleared
    try:
        m = Monitor("warn").install()
        assert len(knobs.runtime.kernel_load_start_hook.calls) == len(load_hooks) + 1
        fire_jit_miss(key="k1")
        assert seen == ["k1"] and m.totals.jit_misses == 1
        m.uninstall()
        assert knobs.runtime.jit_cache_hook is prev and not m.installed
        assert knobs.runtime.kernel_load_start_hook.calls == load_hooks
    finally:
        knobs.runtime.jit_cache_hook = None
    assert knobs.compilation.listener is listener


def test_off_installs_nothing():
    m = Monitor("off").install()
    assert knobs.runtime.jit_cache_hook is None and m.end_step() is None
    m.seal()
    assert not m.sealed


def test_module_api(tmp_path):
    with pytest.raises(RuntimeError):
        jit_monitor.deactivate() or jit_monitor.seal()
    m = jit_monitor.activate("warn", str(tmp_path / "x.jsonl"))
    try:
        assert jit_monitor.active() is m and knobs.runtime.jit_cache_hook is not None
        jit_monitor.seal()
        assert m.sealed
    finally:
        jit_monitor.deactivate()
    assert knobs.runtime.jit_cache_hook is None


def test_torch_compile_after_seal_is_reported():
    torch = pytest.importorskip("torch")
    import torch._dynamo  # noqa: F401 - the monitor watches Dynamo only once the process has it

    m = Monitor("warn").install()
    try:
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        m.begin_step("warm")
        f(torch.ones(4))
        assert m.end_step().dynamo_compiles >= 1
        m.seal()
        f(torch.ones(4))  # same shape: no compile
        assert m.post_seal_events == []
        f(torch.ones(4, 3))  # new rank: Dynamo recompiles
        assert [e["backend"] for e in m.post_seal_events] == ["torch.compile"]
    finally:
        m.uninstall()
        torch._dynamo.reset()


def test_a_torch_compile_after_seal_names_the_function_and_says_recompile():
    """The event names the function Dynamo compiles (its file and line), and says whether it had
    graphs already: what a user needs to extend the plan (issue 53: the first report said only
    "torch.compile frame")."""
    torch = pytest.importorskip("torch")
    import torch._dynamo  # noqa: F401

    def correct_counts(x):
        return x * 2 + 1

    m = Monitor("warn").install()
    try:
        f = torch.compile(correct_counts, backend="eager", dynamic=True)
        f(torch.ones(4))
        m.seal()
        f(torch.ones(1))  # 0/1 specialization: a size of 1 is a graph of its own
        g = torch.compile(lambda x: x - 1, backend="eager")
        g(torch.ones(2))  # a function no warmup ran
        first, second = m.post_seal_events
        where = f"{__file__}:{correct_counts.__code__.co_firstlineno}"
        assert (first["event"], first["kernel"]) == ("dynamo recompile", "correct_counts")
        assert first["repr"] == f"({where}; TORCH_LOGS=recompiles names the guard that failed)"
        assert (second["event"], second["kernel"]) == ("dynamo compile", "<lambda>")
        assert second["repr"].startswith(f"({__file__}:") and "TORCH_LOGS" not in second["repr"]
    finally:
        m.uninstall()
        torch._dynamo.reset()


def test_the_warning_line_of_a_recompile_is_read_back_with_its_function(tmp_path):
    """planner/review/server_logs.py reads the monitor's warning: the function is the kernel."""
    from planner.review.server_logs import PLUGIN_LINE

    m = Monitor("warn", str(tmp_path / "jit.jsonl"))
    m.sealed = True
    line = m._record({"backend": "torch.compile", "event": "dynamo recompile", "kernel": "update_counts",
                      "repr": "(/v/spec_decode/utils.py:565; TORCH_LOGS=recompiles names the guard that failed)"})
    got = PLUGIN_LINE.search(line)
    assert (got["backend"], got["event"], got["kernel"]) == ("torch.compile", "dynamo recompile", "update_counts")
    assert got["repr"].startswith("(/v/spec_decode/utils.py:565;")


def test_a_stack_without_dynamo_s_compile_frame_says_only_a_frame_compiled():
    assert torch_compile.compiling_frame(sys._getframe()) == {"event": "dynamo compile", "kernel": "torch.compile frame"}


# --- DeepGEMM: kernels in its JIT cache (DeepGEMM 2.x layout, csrc/jit/compiler.hpp) -------------

GEMM = "kernel.sm90_fp8_gemm_1d2d.5b0c29cdac95fd74b26b4316a7f7e6a6"
TRANSPOSE = "kernel.transpose_fp32.021add834ef71b5bca08b3e1d31c2d75"


def dg_kernel(root, entry, cubin=True):
    """What one DeepGEMM compile leaves: cache/<entry>/kernel.cu and, once complete, kernel.cubin."""
    path = root / "cache" / entry
    path.mkdir(parents=True, exist_ok=True)
    (path / "kernel.cu").write_text("// code")
    if cubin:
        (path / "kernel.cubin").write_bytes(b"\x7fELF")
    return path


@pytest.fixture
def dg(tmp_path, monkeypatch):
    """A fake deep_gemm module and an empty DG_JIT_CACHE_DIR (not created yet: the first compile does)."""
    root = tmp_path / "dg"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    monkeypatch.setitem(sys.modules, "deep_gemm", ModuleType("deep_gemm"))
    return root


def test_deep_gemm_counts_kernels_not_files(dg, monitor):
    assert "deep_gemm.cache_dir" in monitor.watching and not dg.exists()
    monitor.begin_step("warm/gemm")
    dg_kernel(dg, GEMM)
    dg_kernel(dg, TRANSPOSE)  # the scale-factor layout transform is a kernel of its own
    (dg / "tmp" / "3f2a").mkdir(parents=True)
    (dg / "tmp" / "3f2a" / "kernel.cubin").write_text("nvcc is writing")  # not in cache/: not a kernel
    counts = monitor.end_step()
    assert counts.deep_gemm_jit == 2 and monitor.totals.deep_gemm_jit == 2
    monitor.begin_step("warm/again")
    (dg / "cache" / GEMM / "kernel.sass").write_text("dump")  # more files, same kernel
    assert monitor.end_step().deep_gemm_jit == 0
    assert monitor.post_seal_events == []


def test_deep_gemm_half_written_entry_counts_once_complete(dg, monitor):
    monitor.begin_step("a")
    entry = dg_kernel(dg, GEMM, cubin=False)
    assert monitor.end_step().deep_gemm_jit == 0
    monitor.begin_step("b")
    (entry / "kernel.cubin").write_bytes(b"\x7fELF")
    assert monitor.end_step().deep_gemm_jit == 1
    monitor.begin_step("c")
    assert monitor.end_step().deep_gemm_jit == 0
    assert monitor.totals.deep_gemm_jit == 1


def test_deep_gemm_kernels_there_before_install_are_not_counted(dg):
    dg_kernel(dg, GEMM)
    m = Monitor("warn").install()
    try:
        m.begin_step("a")
        dg_kernel(dg, TRANSPOSE)
        assert m.end_step().deep_gemm_jit == 1
    finally:
        m.uninstall()


def test_deep_gemm_after_seal_names_kernel_step_shape_and_m(dg, monitor, tmp_path):
    monitor.begin_step("warm")
    dg_kernel(dg, TRANSPOSE)
    monitor.end_step()
    monitor.seal()
    monitor.begin_step("verify/gemm-n7168-k2048/m17")
    dg_kernel(dg, GEMM, cubin=False)
    assert monitor.end_step().deep_gemm_jit == 0 and monitor.post_seal_events == []
    monitor.begin_step("verify/gemm-n7168-k2048/m33")
    (dg / "cache" / GEMM / "kernel.cubin").write_bytes(b"\x7fELF")
    assert monitor.end_step().deep_gemm_jit == 1
    [event] = monitor.post_seal_events
    assert {k: event[k] for k in ("backend", "event", "kernel", "cache_entry", "step", "shape", "m")} == {
        "backend": "deep_gemm", "event": "JIT compilation", "kernel": "sm90_fp8_gemm_1d2d",
        "cache_entry": GEMM, "step": "verify/gemm-n7168-k2048/m33", "shape": "gemm-n7168-k2048", "m": 33}
    assert [json.loads(line)["cache_entry"] for line in (tmp_path / "misses.jsonl").read_text().splitlines()] == [GEMM]
    assert (monitor.totals.deep_gemm_jit, monitor.after_seal.deep_gemm_jit) == (1, 1)
    monitor.begin_step("trace/step-3")  # not a hot-path check call: no shape or m
    dg_kernel(dg, "kernel.sm90_fp8_gemm_1d1d.aa")
    monitor.end_step()
    last = monitor.post_seal_events[-1]
    assert last["kernel"] == "sm90_fp8_gemm_1d1d" and "shape" not in last and "m" not in last


def test_deep_gemm_after_seal_error_records_every_kernel_then_raises(dg):
    m = Monitor("error").install()
    try:
        m.seal()
        m.begin_step("verify/gemm-n7168-k2048/m1")
        dg_kernel(dg, GEMM)
        dg_kernel(dg, TRANSPOSE)
        with pytest.raises(JitAfterSealError, match="sm90_fp8_gemm_1d2d(.|\n)*transpose_fp32"):
            m.end_step()
        assert [e["kernel"] for e in m.post_seal_events] == ["sm90_fp8_gemm_1d2d", "transpose_fp32"]
        assert m.step_id is None and m.after_seal.deep_gemm_jit == 2
        m.begin_step("next")
        assert m.end_step().deep_gemm_jit == 0  # counted once, not again at the next boundary
    finally:
        m.uninstall()


def test_deep_gemm_unreadable_entries_are_skipped_then_counted(dg, monitor, monkeypatch):
    (dg / "cache").mkdir(parents=True)
    (dg / "cache" / "kernel.not_a_dir.00").write_text("x")  # a stray file, not a kernel
    (dg / "cache" / "README").write_text("x")
    real_listdir = os.listdir

    def unreadable(path):
        raise PermissionError(13, "Permission denied", path)

    monitor.begin_step("a")
    dg_kernel(dg, GEMM)
    monkeypatch.setattr(os, "listdir", unreadable)
    assert monitor.end_step().deep_gemm_jit == 0  # no crash; looked at again next time
    monkeypatch.setattr(os, "listdir", real_listdir)
    monitor.begin_step("b")
    assert monitor.end_step().deep_gemm_jit == 0  # counted at b's start: between the steps
    assert monitor.totals.deep_gemm_jit == 1


def test_deep_gemm_imported_after_install_is_attached_at_the_next_step(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "deep_gemm", raising=False)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "late"))
    m = Monitor("warn").install()
    try:
        assert "deep_gemm.cache_dir" not in m.watching
        monkeypatch.setitem(sys.modules, "deep_gemm", ModuleType("deep_gemm"))
        m.begin_step("a")
        assert "deep_gemm.cache_dir" in m.watching
        dg_kernel(tmp_path / "late", GEMM)
        assert m.end_step().deep_gemm_jit == 1
    finally:
        m.uninstall()


def test_deep_gemm_kernel_names():
    assert deep_gemm.kernel_name(GEMM) == "sm90_fp8_gemm_1d2d"
    assert deep_gemm.kernel_name(TRANSPOSE) == "transpose_fp32"
    assert deep_gemm.kernel_name("kernel.nohash") == "nohash"


def test_flashinfer_builds_are_counted_and_the_wrapper_removed(monkeypatch, tmp_path):
    """FlashInfer 0.6: JitSpec.build is abstract and JitSpecNvcc builds; a build counts only when
    the module's .so is new or newer (every process calls build(); ninja then does nothing)."""
    so = tmp_path / "batch_prefill.so"

    class JitSpec:
        name = "batch_prefill_with_kv_cache"

        def build(self):
            raise NotImplementedError

        def get_library_path(self):
            return str(so)

    class JitSpecNvcc(JitSpec):
        def build(self, fresh=True):
            if fresh:
                so.write_bytes(b"x" * (so.stat().st_size + 1 if so.exists() else 1))
                os.utime(so, ns=(time.time_ns(), time.time_ns() + 10**9 * (so.stat().st_size)))
            return "built"

    originals = (JitSpec.build, JitSpecNvcc.build)
    core = ModuleType("flashinfer.jit.core")
    core.JitSpec = JitSpec
    jit = ModuleType("flashinfer.jit")
    jit.core = core
    for name, mod in (("flashinfer", ModuleType("flashinfer")), ("flashinfer.jit", jit), ("flashinfer.jit.core", core)):
        monkeypatch.setitem(sys.modules, name, mod)
    m = Monitor("warn").install()
    try:
        m.begin_step("a")
        assert JitSpecNvcc().build() == "built" and m.end_step().flashinfer_jit == 1
        m.begin_step("b")
        assert JitSpecNvcc().build(fresh=False) == "built" and m.end_step().flashinfer_jit == 0  # up to date
        m.seal()
        JitSpecNvcc().build()
        assert [(e["backend"], e["kernel"]) for e in m.post_seal_events] == [("flashinfer", JitSpec.name)]
    finally:
        m.uninstall()
    assert (JitSpec.build, JitSpecNvcc.build) == originals and "flashinfer.jit" in m.watching


def test_works_without_triton():
    code = ("import sys; sys.modules['triton'] = None\n"
            "from executor import jit_monitor\n"
            "m = jit_monitor.activate('error'); m.begin_step('a'); print(m.end_step().jit_misses); "
            "jit_monitor.seal(); print(m.sealed, m.watching)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["0", "True []"]


# --- DeepGEMM 2.8 (DeepJIT: cache/<name>.<hash>/ + .committed), vLLM's vendored copy, loads ----------

DJ_GEMM = "sm90_fp8_gemm_1d2d.5b0c29cdac95fd74b26b4316a7f7e6a6"


def dj_kernel(root, entry, committed=True):
    """What one DeepGEMM 2.8 compile leaves: kernel.cu, kernel.cubin, meta.json, then .committed."""
    path = dg_kernel(root, entry)
    (path / "meta.json").write_text("{}")
    if committed:
        (path / ".committed").write_text("")
    return path


def touch_marker(path, ns):
    os.utime(path / ".committed", ns=(ns, ns))


def test_deep_gemm_28_entry_counts_once_committed_and_after_seal(dg, monitor):
    monitor.begin_step("a")
    entry = dj_kernel(dg, DJ_GEMM, committed=False)
    assert monitor.end_step().deep_gemm_jit == 0  # DeepJIT's miss until the marker is there
    monitor.seal()
    monitor.begin_step("verify/gemm-n7168-k2048/m5")
    (entry / ".committed").write_text("")
    counts = monitor.end_step()
    assert counts.deep_gemm_jit == 1 and counts.deep_gemm_entries == [DJ_GEMM]
    [event] = monitor.post_seal_events
    assert (event["kernel"], event["cache_entry"], event["m"]) == ("sm90_fp8_gemm_1d2d", DJ_GEMM, 5)


def test_deep_gemm_28_loads_are_marker_touches(dg):
    entry = dj_kernel(dg, DJ_GEMM)
    touch_marker(entry, 1_000_000_000)
    m = Monitor("warn").install()
    try:
        m.begin_step("load")
        touch_marker(entry, 2_000_000_000)  # a disk hit: DeepJIT touches the marker
        counts = m.end_step()
        assert (counts.deep_gemm_jit, counts.deep_gemm_loads) == (0, 1)
        m.begin_step("again")
        assert m.end_step().deep_gemm_loads == 0  # observable: a real 0, not "not counted"
        assert m.totals.as_dict()["deep_gemm_loads"] == 1
    finally:
        m.uninstall()


def test_deep_gemm_legacy_loads_are_not_a_false_zero(dg, monitor):
    monitor.begin_step("a")
    dg_kernel(dg, GEMM)
    counts = monitor.end_step()
    assert counts.deep_gemm_jit == 1 and counts.deep_gemm_loads is None
    assert monitor.totals.as_dict()["deep_gemm_loads"] is None


def test_deep_gemm_every_root_of_the_list_is_watched(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", f"{tmp_path / 'w'}:{tmp_path / 'ro'}")
    monkeypatch.setitem(sys.modules, "deep_gemm", ModuleType("deep_gemm"))
    m = Monitor("warn").install()
    try:
        m.begin_step("a")
        dj_kernel(tmp_path / "w", DJ_GEMM)
        dj_kernel(tmp_path / "ro", "transpose_fp32.021add834ef71b5bca08b3e1d31c2d75")
        assert m.end_step().deep_gemm_jit == 2
    finally:
        m.uninstall()


def test_vllm_vendored_deep_gemm_is_watched(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "deep_gemm", raising=False)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    m = Monitor("warn").install()
    try:
        monkeypatch.setitem(sys.modules, "vllm.third_party.deep_gemm", ModuleType("vllm.third_party.deep_gemm"))
        m.begin_step("a")
        dj_kernel(tmp_path, DJ_GEMM)
        assert m.end_step().deep_gemm_jit == 1 and "deep_gemm.cache_dir" in m.watching
    finally:
        m.uninstall()


def test_deep_gemm_pool_kernels_are_the_pools_not_the_main_process(dg, monitor):
    busy = [True]
    monitor.pool_busy = lambda: busy[0]
    monitor.begin_step("triton/a")
    dg_kernel(dg, GEMM)  # a worker compiles meanwhile
    assert monitor.end_step().deep_gemm_jit == 0
    busy[0] = False
    monitor.absorb("deep_gemm", {GEMM})  # the pool's results name it
    monitor.begin_step("deep_gemm/b")
    dg_kernel(dg, TRANSPOSE)  # this one the main process compiled itself
    counts = monitor.end_step()
    assert counts.deep_gemm_entries == [TRANSPOSE] and monitor.totals.deep_gemm_jit == 1


# --- sealed before the warmup (--expect-cached): compiles are misses, loads are not ---------------

def test_expect_cached_reports_compiles_not_disk_loads(tmp_path):
    m = Monitor("warn", str(tmp_path / "m.jsonl")).install()
    try:
        m.seal(loads_ok=True)
        m.begin_step("gemm")
        fn = SimpleNamespace(module="m", name="cached_kernel", jit_function=None)
        knobs.runtime.jit_cache_hook(key="k", repr="cached_kernel", fn=fn, compile={}, is_manual_warmup=False,
                                     already_compiled=False)
        knobs.compilation.listener(src=None, metadata={"name": "cached_kernel"}, metadata_group={},
                                   times=None, cache_hit=True)
        knobs.runtime.jit_post_compile_hook(key="k", repr="", fn=fn, compile={}, is_manual_warmup=False,
                                            already_compiled=False)
        knobs.runtime.kernel_load_start_hook(None, None, "cached_kernel", {}, "hash")
        assert m.post_seal_events == []
        fire_jit_miss("cold_kernel")
        m.end_step()
        assert [(e["kernel"], e["event"]) for e in m.post_seal_events] == [
            ("cold_kernel", "kernel compiled (not in the disk cache)")]
    finally:
        m.uninstall()


def test_expect_cached_error_mode_raises_on_a_compile():
    m = Monitor("error").install()
    try:
        m.seal(loads_ok=True)
        with pytest.raises(JitAfterSealError, match="cold_kernel"):
            fire_jit_miss("cold_kernel")
    finally:
        m.uninstall()
