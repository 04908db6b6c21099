"""FlashInfer's JIT modules in start-up bundles (issue 35 item 1), on CPU: a workspace planted the
way FlashInfer 0.6.13 builds it, packed, installed into another machine's FlashInfer AOT directory.
That FlashInfer itself then loads the placed module without building is shown against its own code
in tests/integration/vllm_parity/test_flashinfer_aot.py."""

from __future__ import annotations

import os

import pytest

from executor.bundle import startup
from executor.caches import flashinfer_jit as fim
from executor.caches import flashinfer_trtllm_dg
from executor.caches.registry import CacheRoots
from executor.caches.roots import Env
from test_bundle import elf
from test_startup_bundle import environ, fill_startup, vllm_fp, write

SO = elf(b" sampling module")


@pytest.fixture(autouse=True)
def flashinfer_0_6_13(monkeypatch):
    monkeypatch.setattr(fim, "flashinfer_version", lambda: "0.6.13")
    for key in ("FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize("listed,caps,name", [
    ("9.0a", [], "90a"), ("9.0", [], "90a"), ("8.0 9.0", [], "80_90a"), ("12.0f", [], "120f"),
    (None, [90], "90a"), (None, [100], "100a"), (None, [120], "120f"), (None, [80, 90], "80_90a"),
    (None, [], None)])
def test_the_workspace_arch_is_named_as_flashinfer_names_it(listed, caps, name):
    env = {"FLASHINFER_CUDA_ARCH_LIST": listed} if listed else {}
    assert fim.arch_dir_name(caps, env) == name


def test_the_jit_dir_follows_the_workspace_base():
    assert fim.jit_dir([90], {"FLASHINFER_WORKSPACE_BASE": "/ws"}) == "/ws/.cache/flashinfer/0.6.13/90a/cached_ops"
    assert fim.jit_dir([90], {}) == os.path.expanduser("~/.cache/flashinfer/0.6.13/90a/cached_ops")


def built_module(workspace, name, payload=SO):
    """A module as FlashInfer's ninja leaves it: the library beside its build files and objects."""
    folder = workspace / ".cache" / "flashinfer" / "0.6.13" / "90a" / "cached_ops" / name
    os.makedirs(folder)
    (folder / f"{name}.so").write_bytes(payload)
    write(str(folder / "build.ninja"), f"build {folder}/{name}.so: link {folder}/{name}.cuda.o\n")
    (folder / f"{name}.cuda.o").write_bytes(b"object")
    write(str(folder / ".ninja_log"), "# ninja log v5\n")
    return folder


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A building machine with two built modules and an AOT directory FlashInfer's wheel left empty."""
    base = tmp_path / "build"
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(base / "ws"))
    built_module(base / "ws", "sampling")
    built_module(base / "ws", "fp8_blockscale_gemm_90", elf(b" gemm"))
    roots = fill_startup(base).replace(flashinfer_jit=str(base / "site" / "flashinfer" / "data" / "aot"))
    return base, roots


def test_a_bundle_carries_each_built_library_and_nothing_that_names_a_path(machine, tmp_path):
    _, roots = machine
    manifest = startup.build(str(tmp_path / "b.warmup"), roots, vllm_fp(), startup.Origin())
    members = sorted(f.path for f in manifest.files if f.path.startswith("flashinfer_jit/"))
    assert members == ["flashinfer_jit/fp8_blockscale_gemm_90/fp8_blockscale_gemm_90.so",
                       "flashinfer_jit/sampling/sampling.so"]


def test_install_places_each_module_where_flashinfer_loads_prebuilt_ones(machine, tmp_path, monkeypatch):
    _, roots = machine
    out = tmp_path / "b.warmup"
    startup.build(str(out), roots, vllm_fp(), startup.Origin())
    here = tmp_path / "serve"
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(here / "ws"))
    aot = here / "site" / "flashinfer" / "data" / "aot"
    os.makedirs(aot / "norm")  # flashinfer-jit-cache's own module: kept, never marked as the bundle's
    (aot / "norm" / "norm.so").write_bytes(elf(b"jit-cache norm"))
    target = CacheRoots.resolve(environ(here)).replace(flashinfer_jit=str(aot))
    placed = startup.install(str(out), target, vllm_fp())
    assert placed.families["flashinfer_jit"].new == 2
    assert (aot / "sampling" / "sampling.so").read_bytes() == SO
    assert (aot / "sampling" / fim.MARKER).exists() and not (aot / "norm" / fim.MARKER).exists()
    assert not (here / "ws").exists()  # nothing in the JIT workspace: there is nothing for ninja to find
    # a bundle built on this machine carries the placed modules again, not flashinfer-jit-cache's
    again = startup.pack(target, vllm_fp(), startup.Origin())[1]
    assert {m for m in again if m.startswith("flashinfer_jit/")} == {
        "flashinfer_jit/sampling/sampling.so", "flashinfer_jit/fp8_blockscale_gemm_90/fp8_blockscale_gemm_90.so"}


def test_a_module_the_aot_directory_has_is_kept(machine, tmp_path):
    _, roots = machine
    out = tmp_path / "b.warmup"
    startup.build(str(out), roots, vllm_fp(), startup.Origin())
    aot = tmp_path / "serve" / "aot"
    os.makedirs(aot / "sampling")
    (aot / "sampling" / "sampling.so").write_bytes(elf(b"prebuilt by flashinfer-jit-cache"))
    target = CacheRoots.resolve(environ(tmp_path / "serve")).replace(flashinfer_jit=str(aot))
    placed = startup.install(str(out), target, vllm_fp()).families["flashinfer_jit"]
    assert (placed.new, placed.kept) == (1, 1)
    assert (aot / "sampling" / "sampling.so").read_bytes() == elf(b"prebuilt by flashinfer-jit-cache")
    assert not (aot / "sampling" / fim.MARKER).exists()


def test_a_machine_without_flashinfer_refuses_a_bundle_with_modules_in_one_line(machine, tmp_path):
    _, roots = machine
    out = tmp_path / "b.warmup"
    startup.build(str(out), roots, vllm_fp(), startup.Origin())
    target = CacheRoots.resolve(environ(tmp_path / "serve")).replace(flashinfer_jit=None)
    with pytest.raises(Exception, match="flashinfer_jit files and there is no flashinfer_jit cache"):
        startup.install(str(out), target, vllm_fp())


def test_rebuilt_names_a_placed_module_flashinfer_built_again_after_the_install(tmp_path):

    built_module(tmp_path / "ws", "sampling")
    jit = tmp_path / "ws" / ".cache" / "flashinfer" / "0.6.13" / "90a" / "cached_ops"
    since = os.stat(jit / "sampling" / "sampling.so").st_mtime
    assert fim.rebuilt(str(jit), ["sampling", "fp8_blockscale_gemm_90"], since) == ["sampling"]
    assert fim.rebuilt(str(jit), ["sampling"], since + 10) == []
    assert fim.rebuilt(None, ["sampling"], 0) == []


def test_after_ready_a_loaded_module_counts_and_one_built_again_is_named(machine, tmp_path, monkeypatch):
    from executor.bundle import usage

    monkeypatch.setattr(usage, "records_reads", lambda root: True)
    _, roots = machine
    out = tmp_path / "b.warmup"
    startup.build(str(out), roots, vllm_fp(), startup.Origin())
    here = tmp_path / "serve"
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(here / "ws"))
    aot = here / "aot"
    placed = startup.install(str(out), CacheRoots.resolve(environ(here)).replace(flashinfer_jit=str(aot)),
                             vllm_fp(), str(here / "vllm"))
    (aot / "sampling" / "sampling.so").read_bytes()   # FlashInfer loads the placed sampling module
    built_module(here / "ws", "fp8_blockscale_gemm_90")  # and builds the other one again in its workspace
    (use,) = [u for u in usage.check(placed.installed) if u.family == "flashinfer_jit"]
    assert (use.installed, use.loaded) == (2, 1)
    assert use.never_loaded == ("fp8_blockscale_gemm_90",) and use.compiled_again == ("fp8_blockscale_gemm_90",)


def test_flashinfers_trtllm_deep_gemm_kernels_travel_without_its_scratch(tmp_path, monkeypatch):
    """The kernels `fp8_blockscale_gemm_90`'s DeepGEMM compiled into TRTLLM_DG_CACHE_DIR/cache/<name>/
    (named by shape and tiling alone) land under the installing machine's directory; tmp/ stays."""
    from executor.bundle import usage

    monkeypatch.setattr(usage, "records_reads", lambda root: True)
    base = tmp_path / "build"
    roots = fill_startup(base)
    kernel = "gemm_swapAB_4096_4096_16_128_128_1_81_8_1_Normal"
    os.makedirs(base / "trtllm_dg" / "cache" / kernel)
    (base / "trtllm_dg" / "cache" / kernel / "nvcc_kernel.cubin").write_bytes(elf(b"cubin"))
    write(str(base / "trtllm_dg" / "tmp" / f"{kernel}_123_456" / "kernel.cu"), "scratch")
    out = tmp_path / "b.warmup"
    manifest = startup.build(str(out), roots, vllm_fp(), startup.Origin())
    assert [f.path for f in manifest.files if f.path.startswith("flashinfer_trtllm_dg/")] == [
        f"flashinfer_trtllm_dg/cache/{kernel}/nvcc_kernel.cubin"]
    here = CacheRoots.resolve(environ(tmp_path / "serve"))
    placed = startup.install(str(out), here, vllm_fp(), str(tmp_path / "serve" / "vllm"))
    cubin = tmp_path / "serve" / "trtllm_dg" / "cache" / kernel / "nvcc_kernel.cubin"
    assert cubin.read_bytes() == elf(b"cubin")  # FlashInfer finds it: Runtime::isPathValid, no nvcc
    (use,) = [u for u in usage.check(placed.installed) if u.family == "flashinfer_trtllm_dg"]
    assert (use.installed, use.loaded, use.never_loaded) == (1, 1, ())


def test_the_trtllm_directory_is_found_as_flashinfer_finds_it():
    def trtllm_root(environ):
        return flashinfer_trtllm_dg.root(Env.of(environ))

    assert trtllm_root({"TRTLLM_DG_CACHE_DIR": "/c", "HOME": "/h"}) == "/c"
    assert trtllm_root({"HOME": "/h"}) == "/h/.tensorrt_llm"
    assert trtllm_root({}).endswith("/tensorrt_llm")
