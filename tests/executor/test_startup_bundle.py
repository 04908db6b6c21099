"""Bundles of a whole vLLM start-up on CPU (issue 25 item 3): cache trees planted the way vLLM
0.25, Inductor, Triton, DeepGEMM and vLLM's FlashInfer autotune write them, packed, inspected and
installed into another machine's cache roots. The GPU part of the fingerprint is stood in for;
the tar, the manifest, the checks and the placement are real."""

from __future__ import annotations

import json
import os
import re

import pytest

from executor.bundle import archive, cli, environment, startup
from executor.caches import registry
from executor.caches.registry import CacheRoots
from vllm_bridge.bundles import writer as bundle_writer
from test_bundle import deepjit_entry, elf, fingerprint, parse, rewrite

CFG = "cfg0123456789"
AOT = "a0" * 32
MODELINFO = "vllm-model_executor-models-llama-LlamaForCausalLM.json"  # vLLM's name for it


def vllm_fp(**changes):
    return {**fingerprint(version="2.8.0"), "vllm": "0.25.0", "vllm_config_hash": CFG, **changes}


def triton_entry(folder, name, files=("k.cubin", "k.json")):
    """A Triton cache entry: its files and a group file naming them by absolute path, as Triton writes."""
    os.makedirs(os.path.join(folder, name))
    for f in files:  # a metadata file is JSON, a cubin an ELF file (the install checks both)
        data = json.dumps({"name": name}).encode() if f.endswith(".json") else elf(f"{name}/{f}".encode())
        with open(os.path.join(folder, name, f), "wb") as out:
            out.write(data)
    with open(os.path.join(folder, name, "__grp__k.json"), "w") as out:
        json.dump({"child_paths": {f: os.path.join(folder, name, f) for f in files}}, out)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture(autouse=True)
def no_cache_variables(monkeypatch):
    """Every cache root from `environ` alone: an earlier test's `warmup execute` in this process
    sets DG_JIT_CACHE_DIR (vLLM's default, executor.caches.deep_gemm_install), which would send an
    install into this user's real cache."""
    for key in ("TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR", "XDG_CACHE_HOME", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)


def environ(base):
    """A machine's environment as the plugin's vLLM sees it before compiling."""
    return {"VLLM_CACHE_ROOT": str(base / "vllm"), "TRITON_HOME": str(base / "home"),
            "TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), "TRTLLM_DG_CACHE_DIR": str(base / "trtllm_dg")}


def fill_startup(base):
    """What vLLM 0.25's start-up leaves: DeepGEMM, vLLM's Triton kernels, the torch.compile cache
    with its AOT artifacts and Inductor's cache inside them, the FlashInfer autotune file."""
    root = base / "vllm"
    deepjit_entry(root / "deep_gemm")
    triton_entry(str(base / "home" / ".triton" / "cache"), "SAMPLERHASH")
    hashed = root / "torch_compile_cache" / "abcdef0123" / "rank_0_0" / "backbone"
    write(str(hashed / "vllm_compile_cache.py"), "{(1, 8192): 'artifact_compile_range_1_8192'}")
    write(str(hashed / "cache_key_factors.json"), json.dumps({"config_hash": CFG}))
    aot = root / "torch_compile_cache" / "torch_aot_compile" / AOT
    write(str(aot / "rank_0_0" / "model"), "aot artifact")
    triton_entry(str(aot / "inductor_cache" / "triton" / "0"), "INDUCTORHASH")
    write(str(aot / "inductor_cache" / "fxgraph" / "xy" / "fkey" / "entry"), "fx graph")
    write(str(root / "flashinfer_autotune_cache" / "flashinfer" / "0.6.13" / "h1" / "autotune_configs.json"), "{}")
    write(str(root / "modelinfos" / MODELINFO), json.dumps({"hash": "h", "modelinfo": {"is_text_generation_model": True}}))
    # Inductor's Triton kernels, in the Inductor directory it started with (TRITON_CACHE_DIR is pinned
    # under it at import): where the H100 pair found them, 98 of them, outside the AOT cache
    triton_entry(str(base / "inductor" / "triton" / "0"), "STARTINDUCTORHASH")
    return CacheRoots.resolve(environ(base)).replace(inductor=str(aot / "inductor_cache"))


@pytest.fixture
def bundle(tmp_path):
    roots = fill_startup(tmp_path / "build")
    out = tmp_path / "s.warmup"
    manifest = startup.build(str(out), roots, vllm_fp(), startup.Origin("vllm-0.25-plugin", "llama", "sha256:d"))
    return out, manifest, roots


def files_under(folder):
    out = {}
    for base, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(base, name)) as f:
                out[os.path.relpath(os.path.join(base, name), folder)] = f.read()
    return out


def test_a_root_inside_another_is_packed_once_with_it(tmp_path):
    roots = CacheRoots({"deep_gemm": "/v/deep_gemm", "triton": "/v/tc/x/inductor/triton/0", "torch_compile": "/v/tc",
                        "inductor": "/v/tc/x/inductor", "flashinfer_autotune": "/v/fi"})
    assert roots.distinct() == {"deep_gemm": "/v/deep_gemm", "torch_compile": "/v/tc", "flashinfer_autotune": "/v/fi"}
    env = CacheRoots.resolve({"XDG_CACHE_HOME": "/x", "TRITON_CACHE_DIR": "/t"})
    assert (env.torch_compile, env.deep_gemm, env.triton) == ("/x/vllm/torch_compile_cache", "/x/vllm/deep_gemm", "/t")
    assert env.flashinfer_autotune == "/x/vllm/flashinfer_autotune_cache"


def test_build_packs_every_family_of_the_start_up(bundle):
    out, manifest, _ = bundle
    assert archive.read_manifest(str(out)) == manifest and manifest.origin == archive.VLLM
    families = {f.path.split("/")[0] for f in manifest.files}
    assert families == {"deep_gemm", "triton", "torch_compile", "flashinfer_autotune", "vllm_modelinfo"}  # inductor: inside AOT
    paths = {f.path for f in manifest.files}
    assert f"torch_compile/torch_aot_compile/{AOT}/rank_0_0/model" in paths
    assert f"torch_compile/torch_aot_compile/{AOT}/inductor_cache/triton/0/INDUCTORHASH/__grp__k.json" in paths
    assert manifest.fingerprint["vllm_config_hash"] == CFG and manifest.fingerprint["vllm"] == "0.25.0"


def test_inspect_shows_the_fingerprint_table_and_sizes_per_family(bundle, capsys):
    out, manifest, _ = bundle
    assert cli.cmd_bundle(parse(["inspect", str(out)])) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert rows["vllm"][1] == "0.25.0"
    assert rows["vllm_config_hash"][1] == CFG and rows["gpu"][1:] == ["NVIDIA", "H100", "80GB", "HBM3"]
    table = {line.split()[0]: line.split() for line in text.splitlines() if line.split()
             and line.split()[0] in registry.names() + ("total",)}
    for family in ("deep_gemm", "triton", "torch_compile", "flashinfer_autotune"):
        size = sum(f.size for f in manifest.files if f.path.startswith(family + "/"))
        assert table[family][3] == str(size), family
    assert table["total"][3] == str(sum(f.size for f in manifest.files))


def test_round_trip_into_other_cache_roots(bundle, tmp_path):
    out, manifest, built = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    placed = startup.install(str(out), roots, vllm_fp())
    assert set(placed.families) == {"deep_gemm", "triton", "torch_compile", "flashinfer_autotune", "vllm_modelinfo"}
    for family in ("triton", "torch_compile", "flashinfer_autotune", "vllm_modelinfo"):
        before, after = files_under(getattr(built, family)), files_under(getattr(roots, family))
        assert set(before) == set(after), family
        for name, text in before.items():
            if "__grp__" not in name:
                assert after[name] == text
    assert files_under(os.path.join(roots.deep_gemm, "cache")) == files_under(os.path.join(built.deep_gemm, "cache"))


def test_installed_triton_entries_point_at_their_installed_files(bundle, tmp_path):
    """Triton's group files list absolute paths: both vLLM's Triton cache and Inductor's, inside the
    AOT artifacts, must name the installed copies, else every kernel compiles again."""
    out, _, _ = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    startup.install(str(out), roots, vllm_fp())
    for entry in (os.path.join(roots.triton, "SAMPLERHASH"),
                  os.path.join(roots.torch_compile, "torch_aot_compile", AOT, "inductor_cache", "triton", "0",
                               "INDUCTORHASH")):
        group = json.load(open(os.path.join(entry, "__grp__k.json")))
        assert group["child_paths"] == {f: os.path.join(entry, f) for f in ("k.cubin", "k.json")}


def test_install_merges_into_a_cache_another_rank_started_and_keeps_its_files(bundle, tmp_path):
    out, _, _ = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    other = os.path.join(roots.torch_compile, "abcdef0123", "rank_1_0", "backbone", "vllm_compile_cache.py")
    mine = os.path.join(roots.torch_compile, "abcdef0123", "rank_0_0", "backbone", "cache_key_factors.json")
    write(other, "rank 1")
    write(mine, "already there")
    placed = startup.install(str(out), roots, vllm_fp())
    assert open(other).read() == "rank 1" and open(mine).read() == "already there"
    assert os.path.isfile(os.path.join(os.path.dirname(mine), "vllm_compile_cache.py"))
    assert placed.families["torch_compile"].kept == 1
    again = startup.install(str(out), roots, vllm_fp())  # a second installer: everything already there
    assert sum(p.new for p in again.families.values()) == 0


def nothing_written(roots):
    return all(not os.path.exists(r) for r in roots if r)


def test_model_info_is_placed_early_alone_then_the_rest_at_load_model(bundle, tmp_path, monkeypatch):
    """vLLM reads its model info while it resolves the model, before any worker: on the H100 the
    bundle run lost 18 s there (a subprocess importing the model) until it was placed at register."""
    out, _, built = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    placed = startup.install_early(str(out), roots, "0.25.0")
    assert set(placed.families) == {"vllm_modelinfo"} and placed.families["vllm_modelinfo"].new == 1
    assert files_under(roots.vllm_modelinfo) == files_under(built.vllm_modelinfo)
    assert not any(os.path.exists(getattr(roots, f)) for f in ("triton", "torch_compile", "flashinfer_autotune"))
    assert set(files_under(roots.deep_gemm)) == {".warmup-bundle.lock"}  # the one lock every installer takes
    calls = []
    real = archive.verify_members
    monkeypatch.setattr(archive, "verify_members", lambda *a, **k: calls.append(a) or real(*a, **k))
    # the next process to load the plugin finds the files: the bundle is not read through again
    assert startup.install_early(str(out), roots, "0.25.0").families["vllm_modelinfo"].kept == 1
    assert calls == []
    again = startup.install(str(out), roots, vllm_fp())
    assert (again.families["vllm_modelinfo"].new, again.families["vllm_modelinfo"].kept) == (0, 1)
    assert again.families["torch_compile"].new > 0


def test_model_info_of_another_vllm_is_refused_in_one_line_nothing_written(bundle, tmp_path):
    out, _, _ = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    with pytest.raises(archive.PlanError) as e:
        startup.install_early(str(out), roots, "0.33.0")
    assert str(e.value) == (f"{out}: refused: the bundle was built for another environment "
                            "(vllm: bundle '0.25.0', here '0.33.0')")
    assert not (tmp_path / "serve").exists()


def test_the_plugin_places_model_info_at_register_and_says_so_in_one_line(bundle, tmp_path, monkeypatch, caplog):
    import importlib.metadata

    from vllm_bridge.bundles import startup as bridge

    out, _, _ = bundle
    for key, value in environ(tmp_path / "serve").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.25.0")
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        placed = bridge.install_early(str(out))
    assert (tmp_path / "serve" / "vllm" / "modelinfos" / MODELINFO).is_file() and set(placed.families) == {
        "vllm_modelinfo"}
    assert [r.getMessage() for r in caplog.records] == [
        f"warmup-planner: bundle {out}, before vLLM resolves the model: installed: vllm_modelinfo 1 new "
        "(0 already there); 0 keys in the precompile manifest"]
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.33.0")
    caplog.clear()
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert bridge.install_early(str(out)) is None and bridge.install_early(None) is None
    assert len(caplog.records) == 1 and "bundle's model info not installed" in caplog.records[0].getMessage()


@pytest.mark.parametrize("here, line", [
    (vllm_fp(vllm_config_hash="cfgOTHER"), f"(vllm_config_hash: bundle '{CFG}', here 'cfgOTHER')"),
    (vllm_fp(vllm="0.33.0"), "(vllm: bundle '0.25.0', here '0.33.0')"),
    (vllm_fp(torch="2.12.0"), "(torch: bundle '2.11.0+cu130', here '2.12.0')"),
])
def test_a_mismatch_is_refused_in_one_line_naming_field_and_both_values_nothing_written(bundle, tmp_path, here, line):
    out, _, _ = bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    with pytest.raises(archive.PlanError) as e:
        startup.install(str(out), roots, here)
    assert str(e.value) == f"{out}: refused: the bundle was built for another environment {line}"
    assert nothing_written(roots)


def test_an_unknown_config_hash_is_not_a_mismatch_an_unknown_vllm_is():
    assert environment.mismatch(vllm_fp(), vllm_fp(vllm_config_hash=None)) is None
    assert environment.mismatch(vllm_fp(), vllm_fp(vllm=None)) == "vllm: bundle '0.25.0', here None"
    assert environment.mismatch(fingerprint(), {**fingerprint(), "vllm": "0.25.0"}) is None  # a plan's bundle


def test_a_corrupted_member_leaves_every_cache_untouched(bundle, tmp_path):
    out, manifest, _ = bundle
    bad = tmp_path / "bad.warmup"
    rewrite(str(out), str(bad), manifest, corrupt=f"torch_compile/torch_aot_compile/{AOT}/rank_0_0/model")
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    with pytest.raises(archive.PlanError, match="does not match its sha256"):
        startup.install(str(bad), roots, vllm_fp())
    assert nothing_written(roots)


def test_cli_install_checks_the_config_hash_when_given(bundle, tmp_path, monkeypatch, capsys):
    out, _, _ = bundle
    monkeypatch.setattr(environment, "measure", lambda: vllm_fp(vllm_config_hash=None))
    serve = tmp_path / "serve"
    for key, value in environ(serve).items():
        monkeypatch.setenv(key, value)
    code = cli.cmd_bundle(parse(["install", str(out), "--vllm-config-hash", "cfgOTHER"]))
    assert code == 2 and capsys.readouterr().err == (
        f"warmup: error: {out}: refused: the bundle was built for another environment "
        f"(vllm_config_hash: bundle '{CFG}', here 'cfgOTHER')\n")
    assert not serve.exists()
    assert cli.cmd_bundle(parse(["install", str(out)])) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("installed: triton 1 new (0 already there), deep_gemm 1 new")
    assert printed[1].startswith("note: vllm_config_hash not checked")
    assert os.path.isfile(serve / "vllm" / "torch_compile_cache" / "torch_aot_compile" / AOT / "rank_0_0" / "model")


def test_verify_of_a_start_up_bundle_never_installed_here_is_one_line(bundle, tmp_path, capsys):
    out, _, _ = bundle
    assert cli.cmd_bundle(parse(["verify", str(out), "--vllm-cache-root", str(tmp_path / "elsewhere")])) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was not installed under the vLLM cache root" in err


def test_verify_reports_the_use_of_a_start_up_bundle_installed_here(bundle, tmp_path, monkeypatch, capsys):
    from executor.bundle import usage

    out, _, _ = bundle
    monkeypatch.setattr(environment, "measure", lambda: vllm_fp())
    monkeypatch.setattr(usage, "records_reads", lambda root: True)
    serve = tmp_path / "serve"
    for key, value in environ(serve).items():
        monkeypatch.setenv(key, value)
    assert cli.cmd_bundle(parse(["install", str(out)])) == 0
    (serve / "vllm" / "torch_compile_cache" / "torch_aot_compile" / AOT / "rank_0_0" / "model").read_text()  # vLLM loads it
    capsys.readouterr()
    assert cli.cmd_bundle(parse(["verify", str(out)])) == 0  # --inert warn: listed
    printed = capsys.readouterr().out
    assert "bundle use: torch_compile: 4 installed, 1 loaded, 3 never loaded" in printed
    assert cli.cmd_bundle(parse(["verify", str(out), "--inert", "error"])) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("bundle verify: FAILED: ")


def test_empty_caches_write_no_bundle(tmp_path):
    out = tmp_path / "s.warmup"
    with pytest.raises(archive.PlanError, match="the start-up's caches are empty"):
        startup.build(str(out), CacheRoots.resolve(environ(tmp_path)), vllm_fp(), startup.Origin())
    assert not out.exists()


# --- through the vLLM plugin (vllm_bridge.plugin with a stand-in worker and VllmConfig) ----------------

def plugin_worker(config_hash=CFG, rank=0):
    from types import SimpleNamespace as NS

    return NS(vllm_config=NS(compute_hash=lambda: config_hash), rank=rank)


@pytest.fixture
def plugin(monkeypatch):
    from vllm_bridge import plugin as plugin_module
    from vllm_bridge.releases import RELEASES

    monkeypatch.setattr(environment, "current", lambda: vllm_fp(vllm_config_hash=None))  # the machine's part
    for key in ("TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR", "XDG_CACHE_HOME", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)

    def start(base, settings, worker, compile_or_warm_up=lambda self: "ready", load=lambda self: "loaded"):
        """One vLLM start-up on the machine `base`: load_model, then compile_or_warm_up_model (a process
        of its own: nothing the plugin pinned in the last start's, TRITON_CACHE_DIR, is set)."""
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
        for key, value in environ(base).items():
            monkeypatch.setenv(key, value)
        release = RELEASES["0.25.0"]
        loaded = plugin_module._load_model(load, release, settings)(worker)
        ready = plugin_module._compile_or_warm_up_model(compile_or_warm_up, release, settings)(worker)
        bundle_writer.finish_at_exit()  # the bundle is written after ready, in a thread of its own
        return loaded, ready
    return start


def vllm_compiles(base, monkeypatch, out, worker=None):
    """vLLM's start-up as the H100 pair showed it: the caches fill, vLLM's AOT compile points
    TORCHINDUCTOR_CACHE_DIR inside its torch.compile cache (vllm/compilation/decorators.py) while
    Inductor's Triton kernels stay in the Inductor directory it started with, and the config's
    compute_hash() is no longer what it was at load_model."""
    def compile_or_warm_up(self):
        assert not out.exists()  # packed once vLLM is ready, not before
        fill_startup(base)
        aot_inductor = base / "vllm" / "torch_compile_cache" / "torch_aot_compile" / AOT / "inductor_cache"
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(aot_inductor))
        if worker is not None:
            worker.vllm_config.compute_hash = lambda: "cfgAFTER"
        return "ready"
    return compile_or_warm_up


def test_the_plugin_builds_after_ready_and_installs_before_vllm_compiles(plugin, tmp_path, monkeypatch, caplog):
    from vllm_bridge.settings import Settings

    out = tmp_path / "s.warmup"
    worker = plugin_worker()
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert plugin(tmp_path / "build", Settings(None, bundle_out=str(out)), worker,
                      vllm_compiles(tmp_path / "build", monkeypatch, out, worker)) == ("loaded", "ready")
    manifest = archive.read_manifest(str(out))
    # the hash of load_model, where an installing worker checks it, not the one of ready
    assert manifest.origin == archive.VLLM and manifest.fingerprint["vllm_config_hash"] == CFG
    # Inductor's directory of load_model is packed: its Triton kernels are there
    assert {f.path.split("/")[0] for f in manifest.files} == {"deep_gemm", "triton", "torch_compile", "inductor",
                                                              "flashinfer_autotune", "vllm_modelinfo"}
    assert len(caplog.records) == 1 and re.fullmatch(
        rf"warmup-planner: bundle {re.escape(str(out))} written \d+\.\d s after ready, in \d+\.\d s beside vLLM "
        rf"\(its files listed at ready in \d+\.\d\d s\): deep_gemm 4 files .*",
        caplog.records[0].getMessage())
    serve = tmp_path / "serve"
    aot_model = serve / "vllm" / "torch_compile_cache" / "torch_aot_compile" / AOT / "rank_0_0" / "model"

    def load(self):
        assert aot_model.read_text() == "aot artifact"  # in place before vLLM loads it (and then compiles)
        return "loaded"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    caplog.clear()
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert plugin(serve, Settings(None, bundle=str(out)), plugin_worker(), load=load) == ("loaded", "ready")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith(f"warmup-planner: bundle {out} installed: triton 1 new (0 already there), "
                                  "deep_gemm 1 new")
    # after ready, one line per family: the AOT model vLLM read is loaded, what nothing read is named
    uses = {m.split(": ")[2]: m for m in messages[1:] if m.startswith("warmup-planner: bundle use: ") and "  " not in m}
    assert sorted(uses) == ["deep_gemm", "flashinfer_autotune", "inductor", "torch_compile", "triton", "vllm_modelinfo"]
    if "reads not recorded" not in uses["torch_compile"]:  # the filesystem under the test records reads
        assert ", 1 loaded, 3 never loaded, 0 compiled again, 0 new" in uses["torch_compile"]
        never = [m for m in messages if "never loaded: torch_compile/" in m]
        assert len(never) == 3 and not any(m.endswith(f"{AOT}/rank_0_0") for m in never)


def test_inert_entries_are_fatal_under_the_setting_and_only_then(plugin, bundle, tmp_path, monkeypatch, caplog):
    from executor.bundle import usage
    from vllm_bridge.bundles import startup as bridge
    from vllm_bridge.settings import PluginError, Settings

    out, _, _ = bundle
    monkeypatch.setattr(usage, "records_reads", lambda root: True)  # whatever the test's filesystem
    settings = Settings.from_env({bridge.INERT_SETTING: " Error ", "WARMUP_BUNDLE": str(out)})
    assert settings.bundle_inert == "error"
    with caplog.at_level("INFO", logger="vllm.warmup_planner"), pytest.raises(bridge.InertBundle, match="inert"):
        plugin(tmp_path / "serve", settings, plugin_worker())
    assert caplog.records[-1].levelname == "ERROR" and "WARMUP_BUNDLE_INERT=error" in caplog.records[-1].getMessage()
    monkeypatch.setenv(bridge.INERT_SETTING, "error")  # the settings read at register are what counts
    assert Settings.from_env({"WARMUP_BUNDLE": str(out)}).bundle_inert == "warn"
    assert plugin(tmp_path / "serve2", Settings(None, bundle=str(out)), plugin_worker()) == ("loaded", "ready")
    with pytest.raises(PluginError) as e:
        Settings.from_env({bridge.INERT_SETTING: "fatal"})
    assert str(e.value) == "warmup-planner: WARMUP_BUNDLE_INERT must be warn or error, got 'fatal'"


def test_the_plugin_refuses_another_config_in_one_line_and_vllm_starts_cold(plugin, bundle, tmp_path, caplog):
    from vllm_bridge.settings import Settings

    out, _, _ = bundle
    serve = tmp_path / "serve"
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert plugin(serve, Settings(None, bundle=str(out)), plugin_worker("cfgOTHER")) == ("loaded", "ready")
    assert [r.getMessage() for r in caplog.records] == [
        f"warmup-planner: bundle not installed, vLLM starts cold: {out}: refused: the bundle was built for another "
        f"environment (vllm_config_hash: bundle '{CFG}', here 'cfgOTHER')"]
    assert not serve.exists()


def test_only_rank_0_packs_and_an_unwritable_output_is_said_before_the_weights(plugin, tmp_path, monkeypatch, caplog):
    from vllm_bridge.settings import Settings

    out = tmp_path / "s.warmup"
    plugin(tmp_path / "b1", Settings(None, bundle_out=str(out)), plugin_worker(rank=1),
           vllm_compiles(tmp_path / "b1", monkeypatch, out))
    assert not out.exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    nowhere = blocked / "s.warmup"                               # its directory cannot be made
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert plugin(tmp_path / "b2", Settings(None, bundle_out=str(nowhere)), plugin_worker(),
                      vllm_compiles(tmp_path / "b2", monkeypatch, nowhere)) == ("loaded", "ready")
    assert len(caplog.records) == 1 and "WARMUP_BUNDLE_OUT: no bundle will be written" in caplog.records[0].getMessage()
    assert blocked.read_text() == "not a directory"


def test_bundle_out_makes_its_directory(plugin, tmp_path, monkeypatch):
    from vllm_bridge.settings import Settings

    out = tmp_path / "new" / "dirs" / "s.warmup"                # issue 35: a warning and no bundle before
    plugin(tmp_path / "b", Settings(None, bundle_out=str(out)), plugin_worker(),
           vllm_compiles(tmp_path / "b", monkeypatch, out))
    assert out.is_file()


def test_with_a_plan_the_bundle_names_it_and_is_packed_after_the_plans_warmup(plugin, tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from vllm_bridge import plugin as plugin_module
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker import WorkerWarmup

    out = tmp_path / "s.warmup"
    state = NS(start=lambda: None, check_live_kernels=lambda: None,
               phases=NS(phase=lambda name: __import__("contextlib").nullcontext()),
               warm_up=lambda original: original(), expanded=NS(plan="vllm-0.25-plugin", engine="llama-fp8"),
               report=NS(digest="sha256:p"))
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, worker, release, settings: state))
    worker = plugin_worker()
    plugin(tmp_path / "b", Settings("vllm-0.25-plugin", bundle_out=str(out)), worker,
           vllm_compiles(tmp_path / "b", monkeypatch, out))
    manifest = archive.read_manifest(str(out))
    assert (manifest.plan, manifest.engine, manifest.plan_digest) == ("vllm-0.25-plugin", "llama-fp8", "sha256:p")
    assert getattr(worker, plugin_module.STATE) is state


def test_the_plugin_is_active_for_a_bundle_alone():
    from vllm_bridge.settings import Settings

    assert not Settings.from_env({}).active
    assert Settings.from_env({"WARMUP_BUNDLE": "b.warmup"}).active
    assert Settings.from_env({"WARMUP_BUNDLE_OUT": "b.warmup"}).bundle_out == "b.warmup"


def test_register_places_the_bundles_model_info_after_patching_the_worker(monkeypatch):
    """vLLM loads its general plugins in EngineArgs.__post_init__, before it resolves the model."""
    import sys
    from types import SimpleNamespace as NS

    from vllm_bridge import plugin as plugin_module

    from vllm_bridge.bundles import startup as bridge

    calls = []
    monkeypatch.setitem(sys.modules, "vllm", NS(__version__="0.25.0"))
    monkeypatch.setattr(plugin_module, "patch_worker", lambda release, settings: calls.append("patch"))
    monkeypatch.setattr(bridge, "install_early", lambda path, stage=True: calls.append(("early", path)))
    monkeypatch.setenv("WARMUP_BUNDLE", "/b/s.warmup")
    for key in ("WARMUP_PLAN", "WARMUP_BUNDLE_OUT"):
        monkeypatch.delenv(key, raising=False)
    plugin_module.register()
    assert calls == ["patch", ("early", "/b/s.warmup")]
