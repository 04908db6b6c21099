"""A start-up bundle on a machine that never built it (issue 43 items 2-6), on CPU.

A building machine's caches are planted in directory A the way vLLM 0.25, Inductor, Triton and
DeepGEMM write them, with the building paths where they write them: vLLM's compile cache names each
artifact by absolute path, Triton's group files name their files, Inductor's code and torch's
artifacts name A in comments and repro strings. The bundle is built, A is deleted, and it is
installed into B. The test's own reading of the loaders' formats (not the install's) then finds
every path a loader follows in the installed files: each must be in B and there. That vLLM's own
loader takes such a cache is tests/integration/vllm_parity/test_compile_cache_relocation.py.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import pickle
import pprint
import shutil
import stat
import struct
import time
import zlib
from types import SimpleNamespace

import pytest

from executor.bundle import archive, cli, machine_check, records, startup, usage
from executor.caches import registry, relocate
from executor.caches.checks import (
    by_kind,
    elf_problem,
    file_check,
    group_problem,
    torch_artifact_problem,
)
from executor.caches.family import Family, PathRule
from executor.caches.inductor import rewrite_pickled
from executor.caches.registry import CacheRoots
from executor.caches.relocate import Outcome, Relocation, relocate_family, summary_lines
from executor.caches.tree import collect_tree, files_under, place_tree
from test_bundle import deepjit_entry, elf, parse
from test_startup_bundle import MODELINFO, environ, vllm_fp, write

H = "0123456789"
AOT = "a0" * 32
ARTIFACTS = ("artifact_compile_range_1_8192_subgraph_0", "artifact_compile_range_1_8192_subgraph_1")


def inductor_entry(cache: str, name: str) -> bytes:
    """An Inductor entry as Inductor pickles it, with plain objects in place of its classes: the
    kernel's autotuner keeps its .best_config's absolute path (which Inductor opens) and its source
    file's, its generated code names the path in a comment, its cubin in its debug information."""
    return pickle.dumps({"autotune_cache": {"local_cache": ("LocalAutotuneCache", f"{cache}/zr/{name}.best_config")},
                         "filename": f"{cache}/zr/c{name}.py",
                         "source_code": f"# kernel path: {cache}/zr/c{name}.py\ndef call(args): ...\n",
                         "cubin": elf(f"{cache}/zr/c{name}.py".encode())}, protocol=4)


def torch_artifact(entry: bytes) -> bytes:
    """A standalone-compile artifact written by torch's own serializers (torch 2.11's layout, seen on
    the H100): its header, torch's key, the graph's key, the cache artifacts (an Inductor entry and
    an autotune result)."""
    from torch.compiler._cache import _serialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer, BytesWriter

    artifacts = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    artifacts.append(("autotune", [SimpleNamespace(key="zr/k.best_config", content=b'{"XBLOCK": 64}')]))
    artifacts.append(("inductor", [SimpleNamespace(key="fkey", content=entry)]))
    writer = BytesWriter()
    writer.write_bytes(b"CacheCompiledArtifact")
    writer.write_bytes(b"torchkey")
    writer.write_str("graphkey")
    writer.write_bytes(artifacts.to_bytes())
    return writer.to_bytes()


def torch_entries(path: str) -> list:
    """The Inductor entries in a standalone-compile artifact, read with torch's own readers."""
    from torch.compiler._cache import CacheArtifactManager
    from torch.utils._appending_byte_serializer import BytesReader

    reader = BytesReader(open(path, "rb").read())
    fields = [reader.read_bytes(), reader.read_bytes(), reader.read_str(), reader.read_bytes()]
    assert reader.is_finished() and fields[0] == b"CacheCompiledArtifact"
    return [pickle.loads(a.content) for a in CacheArtifactManager.deserialize(fields[3])["inductor"]]


def write_bytes(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def compile_cache(folder: str, keys=ARTIFACTS, where: str | None = None) -> None:
    """vllm_compile_cache.py as vLLM 0.25 writes it: pprint of {(range, index, compiler): handle}."""
    cache = {((1, 8192), i, "inductor_standalone"): {"cache_key": f"k{i}",
                                                     "graph_handle": (key, os.path.join(where or folder, key))}
             for i, key in enumerate(keys)}
    write(os.path.join(folder, "vllm_compile_cache.py"), pprint.PrettyPrinter(indent=4).pformat(cache))


def triton_entry(folder: str, name: str, source: str) -> None:
    """A Triton entry: a cubin, metadata, IR naming the kernel's source file, and the group file."""
    os.makedirs(folder)
    files = {f"{name}.cubin": elf(source.encode()), f"{name}.json": json.dumps({"name": name}).encode(),
             f"{name}.ttir": f'loc("{source}":12:0)\n'.encode()}
    for f, data in files.items():
        with open(os.path.join(folder, f), "wb") as out:
            out.write(data)
    write(os.path.join(folder, f"__grp__{name}.json"),
          json.dumps({"child_paths": {f: os.path.join(folder, f) for f in files}}))


def fill(base) -> CacheRoots:
    """A's caches, every building path where the writers put one."""
    roots = CacheRoots.resolve(environ(pathlib.Path(base)))
    base = str(base)
    tc = roots.torch_compile
    backbone = os.path.join(tc, H, "rank_0_0", "backbone")
    compile_cache(backbone)
    aot = os.path.join(tc, "torch_aot_compile", AOT)
    inductor_cache = os.path.join(aot, "inductor_cache")
    for i, key in enumerate(ARTIFACTS):
        write_bytes(os.path.join(backbone, key), torch_artifact(inductor_entry(inductor_cache, f"k{i}")))
    write(os.path.join(backbone, "computation_graph.py"), f"# {backbone}\n")
    write(os.path.join(backbone, "cache_key_factors.json"), json.dumps({"env": {"VLLM_CACHE_ROOT": base}}))
    write_bytes(os.path.join(aot, "rank_0_0", "model"), pickle.dumps({"graph": "...", "traced": f"traced from {aot}"},
                                                                     protocol=4))
    for i in range(len(ARTIFACTS)):
        write(os.path.join(inductor_cache, "zr", f"k{i}.best_config"), json.dumps({"XBLOCK": 64}))
    write_bytes(os.path.join(inductor_cache, "fxgraph", "fk"), inductor_entry(inductor_cache, "k0"))
    write(os.path.join(roots.inductor, "zr", "k9.best_config"), json.dumps({"XBLOCK": 32}))
    write_bytes(os.path.join(roots.inductor, "fxgraph", "fk9"), inductor_entry(roots.inductor, "k9"))
    triton_entry(os.path.join(inductor_cache, "triton", "0", "AOTKERNEL"), "triton_poi_0",
                 os.path.join(inductor_cache, "ab", "cabc.py"))
    write(os.path.join(inductor_cache, "ab", "cabc.py"), f"# kernel path: {inductor_cache}/ab/cabc.py\n")
    triton_entry(os.path.join(roots.inductor, "triton", "0", "STARTKERNEL"), "triton_red_1",
                 os.path.join(roots.inductor, "xy", "cxy.py"))
    triton_entry(os.path.join(roots.triton, "SAMPLER"), "_topk_topp_kernel", "/site/vllm/sample.py")
    deepjit_entry(pathlib.Path(roots.deep_gemm))
    write(os.path.join(roots.vllm_modelinfo, MODELINFO), json.dumps({"hash": "h", "modelinfo": {}}))
    write(os.path.join(roots.flashinfer_autotune, "configs.json"), "{}")
    return roots


def followed_paths(path: str) -> list[str]:
    """The paths a loader follows in a cache file, read as the loaders read them (vLLM's compile
    cache: the handle's path, which 0.25 opens, and <its directory>/<key>, which 0.33 opens;
    Triton's group files: every file listed; Inductor's entries, alone or in a torch artifact
    (read with torch's own readers): each autotuner's .best_config)."""
    name = os.path.basename(path)
    if name == "vllm_compile_cache.py":
        cache = ast.literal_eval(open(path).read())
        return [p for v in cache.values() for p in (v["graph_handle"][1],
                                                   os.path.join(os.path.dirname(path), v["graph_handle"][0]))]
    if name.startswith("__grp__"):
        return list(json.load(open(path))["child_paths"].values())
    entries = torch_entries(path) if name.startswith("artifact_compile_range_") else \
        [pickle.load(open(path, "rb"))] if os.path.basename(os.path.dirname(path)) == "fxgraph" else []
    return [e["autotune_cache"]["local_cache"][1] for e in entries]


def install_elsewhere(tmp_path, change=None, keep_building=False):
    """Build in A (after `change(roots)`), delete A, install into B: (Installation, B's roots, A)."""
    a, b = tmp_path / "A", tmp_path / "B"
    built = fill(a)
    if change is not None:
        change(built)
    out = str(tmp_path / "s.warmup")
    startup.build(out, built, vllm_fp(), startup.Origin())
    if not keep_building:
        shutil.rmtree(a)
    here = CacheRoots.resolve(environ(b))
    return startup.install(out, here, vllm_fp(), str(b / "vllm")), here, str(a)


def test_every_path_a_loader_follows_is_this_machines_after_the_building_one_is_gone(tmp_path):
    placed, here, a = install_elsewhere(tmp_path)
    assert not os.path.exists(a) and placed.problem_lines() == []
    installed = [f for root in here.values() if root and os.path.isdir(root) for f in files_under(root)]
    followed = {(f, p) for f in installed for p in followed_paths(f)}
    # the compile cache, three Triton groups, two torch artifacts and two Inductor entries
    assert len({f for f, _ in followed}) == 8
    for f, p in followed:
        assert p.startswith(str(tmp_path / "B") + os.sep) and os.path.isfile(p), (f, p)
    # A's cache roots are still named only where nothing follows them (in text: comments, debug
    # information), in files each family's rules kept as they are or rewrote
    built = archive.read_manifest(str(tmp_path / "s.warmup")).roots.values()
    naming_a = sorted(os.path.relpath(f, tmp_path / "B") for f in installed
                      if any(r.encode() in open(f, "rb").read() for r in built))
    handled = {rel for o in placed.relocated.values() for rel in [*o.rewritten, *(r for r, _ in o.kept)]}
    assert naming_a and all(any(n.endswith(k) for k in handled) for n in naming_a), naming_a
    assert not any(os.path.basename(n) in ("vllm_compile_cache.py",) or "__grp__" in n for n in naming_a)


def test_vllms_compile_cache_is_rewritten_as_vllm_writes_it(tmp_path):
    placed, here, _ = install_elsewhere(tmp_path)
    path = os.path.join(here.torch_compile, H, "rank_0_0", "backbone", "vllm_compile_cache.py")
    text = open(path).read()
    cache = ast.literal_eval(text)
    assert text == pprint.PrettyPrinter(indent=4).pformat(cache)
    assert [v["graph_handle"] for v in cache.values()] == [(k, os.path.join(os.path.dirname(path), k)) for k in ARTIFACTS]
    assert placed.relocated["torch_compile"].rewritten == (
        *(f"{H}/rank_0_0/backbone/{a}" for a in ARTIFACTS), f"{H}/rank_0_0/backbone/vllm_compile_cache.py",
        f"torch_aot_compile/{AOT}/inductor_cache/fxgraph/fk",
        f"torch_aot_compile/{AOT}/inductor_cache/triton/0/AOTKERNEL/__grp__triton_poi_0.json")
    assert (f"torch_aot_compile/{AOT}/rank_0_0/model", relocate.TEXT_ONLY) in placed.relocated["torch_compile"].kept


def _backbone(roots) -> str:
    return os.path.join(roots.torch_compile, H, "rank_0_0", "backbone")


def _cut(path: str) -> None:
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


@pytest.mark.parametrize("change,why", [
    (lambda r: os.unlink(os.path.join(_backbone(r), ARTIFACTS[1])), f"its artifact {ARTIFACTS[1]} is not here"),
    (lambda r: compile_cache(_backbone(r), where="/elsewhere"), "outside this cache"),
])
def test_a_graph_vllm_would_fail_on_is_taken_out_of_its_compile_cache_in_one_line(tmp_path, change, why):
    placed, here, _ = install_elsewhere(tmp_path, change)
    lines = placed.problem_lines()
    assert lines and all(why in line and "vllm_compile_cache.py" in line for line in lines)
    path = os.path.join(_backbone(here), "vllm_compile_cache.py")
    if "outside" in why:  # both graphs named a path outside: the file goes
        assert len(lines) == 2 and not os.path.exists(path)
    else:                   # the other graph stays, the file as vLLM writes it
        assert len(lines) == 1 and "entry taken out" in lines[0]
        assert [v["graph_handle"][0] for v in ast.literal_eval(open(path).read()).values()] == [ARTIFACTS[0]]


def test_a_cut_artifact_is_not_installed_and_its_graph_taken_out(tmp_path):
    placed, here, _ = install_elsewhere(tmp_path, lambda r: _cut(os.path.join(_backbone(r), ARTIFACTS[1])))
    dropped, taken = placed.problem_lines()
    assert dropped.startswith(f"torch_compile/{H}/rank_0_0/backbone/{ARTIFACTS[1]} not installed: ") and \
        "cannot be rewritten (ValueError: not a pickle, a torch artifact or torch's cache artifacts)" in dropped
    assert f"entry taken out: graph ((1, 8192), 1, 'inductor_standalone'): its artifact {ARTIFACTS[1]} is not here" in taken
    assert [v["graph_handle"][0] for v in ast.literal_eval(open(os.path.join(_backbone(here), "vllm_compile_cache.py"))
                                                              .read()).values()] == [ARTIFACTS[0]]


def test_a_cut_artifact_at_the_same_paths_is_found_by_the_check(tmp_path):
    """The same paths on both machines: nothing to rewrite; the check after placement takes it out."""
    a = tmp_path / "A"
    roots = fill(a)
    _cut(os.path.join(_backbone(roots), ARTIFACTS[1]))
    out = str(tmp_path / "s.warmup")
    startup.build(out, roots, vllm_fp(), startup.Origin())
    shutil.move(str(a), str(tmp_path / "away"))
    placed = startup.install(out, CacheRoots.resolve(environ(a)), vllm_fp(), str(a / "vllm"))
    [line] = placed.problem_lines()
    assert "entry taken out" in line and "not a whole torch artifact (cut short or corrupted)" in line


def test_a_compile_cache_vllm_cannot_read_is_not_installed(tmp_path):
    placed, here, _ = install_elsewhere(tmp_path, lambda r: _cut(os.path.join(_backbone(r), "vllm_compile_cache.py")))
    [line] = placed.problem_lines()
    assert line.endswith("vllm_compile_cache.py not installed: it names the building machine's "
                         f"{tmp_path / 'A' / 'vllm' / 'torch_compile_cache'} and cannot be rewritten (SyntaxError)")
    assert not os.path.exists(os.path.join(_backbone(here), "vllm_compile_cache.py"))


def test_a_compile_cache_vllm_cannot_read_is_removed_where_nothing_moved(tmp_path):
    """The same paths on both machines: nothing to rewrite, and the check after placement removes it."""
    a = tmp_path / "A"
    roots = fill(a)
    _cut(os.path.join(_backbone(roots), "vllm_compile_cache.py"))
    out = str(tmp_path / "s.warmup")
    startup.build(out, roots, vllm_fp(), startup.Origin())
    shutil.move(str(a), str(tmp_path / "away"))
    placed = startup.install(out, CacheRoots.resolve(environ(a)), vllm_fp(), str(a / "vllm"))
    [line] = placed.problem_lines()
    assert "vllm_compile_cache.py removed: not a compile cache vLLM can read (SyntaxError)" in line
    assert not os.path.exists(os.path.join(_backbone(roots), "vllm_compile_cache.py"))


@pytest.mark.parametrize("name,damage,why", [
    ("triton_red_1.cubin", lambda p: _cut(p), "cut short"),
    ("triton_red_1.json", lambda p: open(p, "w").write("{"), "not valid JSON"),
])
def test_a_triton_entry_triton_would_fail_on_goes_whole(tmp_path, name, damage, why):
    def change(roots):
        damage(os.path.join(roots.inductor, "triton", "0", "STARTKERNEL", name))

    placed, here, _ = install_elsewhere(tmp_path, change)
    [line] = placed.problem_lines()
    assert line.startswith("inductor: ") and name in line and why in line
    assert not os.path.exists(os.path.join(here.inductor, "triton", "0", "STARTKERNEL"))
    assert os.path.isdir(os.path.join(here.triton, "SAMPLER"))  # the others stay


def test_a_triton_group_that_cannot_be_rewritten_is_not_installed(tmp_path):
    """Without its group file an entry is a miss to Triton, which compiles the kernel again."""
    def change(roots):
        _cut(os.path.join(roots.inductor, "triton", "0", "STARTKERNEL", "__grp__triton_red_1.json"))

    placed, here, _ = install_elsewhere(tmp_path, change)
    [line] = placed.problem_lines()
    assert line.startswith("inductor/triton/0/STARTKERNEL/__grp__triton_red_1.json not installed: ")
    assert line.endswith("cannot be rewritten (JSONDecodeError)")
    assert not os.path.exists(os.path.join(here.inductor, "triton", "0", "STARTKERNEL", "__grp__triton_red_1.json"))


def test_a_file_naming_the_building_paths_that_no_rule_covers_is_not_installed(tmp_path):
    def change(roots):
        write(os.path.join(_backbone(roots), "mystery.bin"), f"opens {roots.torch_compile}/x")

    placed, here, _ = install_elsewhere(tmp_path, change)
    [line] = placed.problem_lines()
    assert line.startswith(f"torch_compile/{H}/rank_0_0/backbone/mystery.bin not installed: it names the building")
    assert not os.path.exists(os.path.join(_backbone(here), "mystery.bin"))
    assert os.path.isfile(os.path.join(_backbone(here), "vllm_compile_cache.py"))


def test_a_later_rank_finds_it_all_in_place_but_what_was_left_out(tmp_path):
    def change(roots):
        write(os.path.join(_backbone(roots), "mystery.bin"), f"opens {roots.torch_compile}/x")

    placed, here, _ = install_elsewhere(tmp_path, change)
    again = startup.install(str(tmp_path / "s.warmup"), here, vllm_fp(), str(tmp_path / "B" / "vllm"))
    assert again.installed is None and all(p.new == 0 for p in again.families.values())


def test_reads_of_the_building_copy_are_named_and_fail_inert_error(tmp_path, capsys):
    """Issue 43 item 4: installed on the machine that built it, a loader that reads the building copy
    instead of the installed one is named, per family (what a machine that never built it would not have)."""
    placed, here, a = install_elsewhere(tmp_path, keep_building=True)
    building = os.path.join(a, "vllm", "torch_compile_cache", H, "rank_0_0", "backbone", ARTIFACTS[0])
    assert building in placed.installed.elsewhere["torch_compile"]
    # vLLM 0.25 reading the artifact at the handle's old path, as the kernel records a read (relatime:
    # the access time moves past the mark), whatever this test's filesystem records
    os.utime(building, (time.time(), os.stat(building).st_mtime))
    uses = {u.family: u for u in usage.check(placed.installed)}
    assert uses["torch_compile"].elsewhere == (building,) and uses["triton"].elsewhere == ()
    assert usage.inert_count(list(uses.values())) >= 1
    lines = usage.lines(list(uses.values()))
    assert any(line.startswith("  read from elsewhere: torch_compile: 1 files") for line in lines)
    code = cli.cmd_bundle(parse(["verify", str(tmp_path / "s.warmup"), "--vllm-cache-root", str(tmp_path / "B" / "vllm"),
                                 "--inert", "error"]))
    assert code == 1 and "read from the building machine's copy" in capsys.readouterr().out


def test_an_image_built_without_the_gpu_is_checked_on_the_machine_at_start(tmp_path, monkeypatch, capsys):
    """Issue 43 item 6: `install --target bundle` asks no GPU and marks the install; the plugin's check
    keeps it on a matching machine and removes it from another."""
    a = tmp_path / "A"
    out = str(tmp_path / "s.warmup")
    startup.build(out, fill(a), vllm_fp(), startup.Origin())
    serve = tmp_path / "B"
    for key, value in environ(serve).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli.environment, "measure", lambda: pytest.fail("--target bundle must not measure"))
    assert cli.cmd_bundle(parse(["install", out, "--target", "bundle"])) == 0
    assert "installed against the bundle's own fingerprint" in capsys.readouterr().out
    root = str(serve / "vllm")
    [pending] = records.pending(root)
    model = os.path.join(root, "modelinfos", MODELINFO)
    assert os.path.isfile(model)
    [line] = machine_check.check(root, vllm_fp())
    assert "this machine matches it" in line and records.pending(root) == [] and os.path.isfile(model)

    shutil.rmtree(serve)
    assert cli.cmd_bundle(parse(["install", out, "--target", "bundle"])) == 0
    [line] = machine_check.check(root, vllm_fp(gpu="NVIDIA H200"))
    assert "installed for another machine (gpu: bundle 'NVIDIA H100 80GB HBM3', here 'NVIDIA H200')" in line
    assert not os.path.exists(model) and not os.listdir(os.path.join(root, "deep_gemm", "cache"))


def test_inspect_says_what_an_install_does_with_the_building_paths(tmp_path, capsys):
    out = str(tmp_path / "s.warmup")
    startup.build(out, fill(tmp_path / "A"), vllm_fp(), startup.Origin())
    assert cli.cmd_bundle(parse(["inspect", out])) == 0
    text = capsys.readouterr().out
    assert "members naming the building machine's cache paths (an install makes them this machine's):" in text
    assert "torch_compile: 5 rewritten for the installing machine" in text
    assert "triton: 1 rewritten for the installing machine, 0 kept (no loader follows the paths), 0 not installed" in text
    assert "inductor: 2 rewritten for the installing machine, 2 kept" in text


def test_a_family_is_added_in_one_place(tmp_path, monkeypatch):
    """One module's Family and one row in the table: packed, relocated, placed, checked and reported
    with no other change."""
    def root(env):
        return env.environ.get("EXAMPLE_CACHE_DIR")

    example = Family(name="example", label="Example", root=root,
                     collect=lambda r, fp: (collect_tree(r, "example"), []),
                     place=lambda p: place_tree(p.staged, p.dest, p.move),
                     paths=(PathRule(lambda rel, path: rel.endswith(".idx"), lambda data, reloc, final:
                                     reloc.moved(data.decode()).encode(), "its index names its file"),))
    monkeypatch.setattr(registry, "FAMILIES", registry.FAMILIES + (example,))
    env_a = {**environ(tmp_path / "A"), "EXAMPLE_CACHE_DIR": str(tmp_path / "A" / "ex")}
    write(str(tmp_path / "A" / "ex" / "k.idx"), str(tmp_path / "A" / "ex" / "k.bin"))
    write(str(tmp_path / "A" / "ex" / "k.bin"), "kernel")
    out = str(tmp_path / "s.warmup")
    manifest = startup.build(out, CacheRoots.resolve(env_a), vllm_fp(), startup.Origin())
    assert {"example/k.idx", "example/k.bin"} <= {f.path for f in manifest.files}
    shutil.rmtree(tmp_path / "A")
    env_b = {**environ(tmp_path / "B"), "EXAMPLE_CACHE_DIR": str(tmp_path / "B" / "ex")}
    placed = startup.install(out, CacheRoots.resolve(env_b), vllm_fp(), str(tmp_path / "B" / "vllm"))
    assert placed.families["example"].new == 2 and "example" in archive.read_manifest(out).roots
    assert open(tmp_path / "B" / "ex" / "k.idx").read() == str(tmp_path / "B" / "ex" / "k.bin")
    assert "example" in {u.family for u in usage.check(placed.installed)}


def test_the_pickle_rewrite_moves_path_strings_only_and_keeps_everything_else():
    """A path string is moved (to a longer path: SHORT_BINUNICODE becomes BINUNICODE, frames go), a
    string that only mentions a path is kept, nested pickles in bytes are rewritten, and moving back
    gives the same opcodes as the original."""
    import pickletools

    from executor.caches import torch_artifacts

    old, new = "/b/inductor", "/serving/machine/" + "x" * 300 + "/inductor"
    inner = pickle.dumps({"key": f"{old}/zr/k.best_config"}, protocol=4)
    data = pickle.dumps([f"{old}/zr/k.best_config", f"# kernel path: {old}/zr/c.py", inner, 7, f"{old}/zr/k.best_config"],
                        protocol=4)

    def moved(path, a=old, b=new):
        return b + path[len(a):] if path.startswith(a + "/") else None

    out = torch_artifacts.rewrite(data, moved, (old.encode(),))
    value = pickle.loads(out)
    assert value[0] == value[4] == f"{new}/zr/k.best_config" and value[1] == f"# kernel path: {old}/zr/c.py"
    assert pickle.loads(value[2]) == {"key": f"{new}/zr/k.best_config"} and value[3] == 7
    back = torch_artifacts.rewrite(out, lambda p: moved(p, new, old), (new.encode(),))

    def ops(blob):
        return [(op.name, arg) for op, arg, _ in pickletools.genops(blob) if op.name != "FRAME"]

    restored, original = pickle.loads(back), pickle.loads(data)
    assert ops(back)[:3] == ops(data)[:3] and restored[:2] + restored[3:] == original[:2] + original[3:]
    assert pickle.loads(restored[2]) == pickle.loads(original[2])  # the same object, without its frame
    with pytest.raises(ValueError):
        torch_artifacts.rewrite(b"not a pickle " + old.encode(), moved, (old.encode(),))


def test_every_monitored_family_counts_on_the_monitor_and_is_read_back_from_the_logs():
    """A family's module names the JIT monitor's counters of its compiles and the backend its events
    carry: each must be one the monitor keeps, and one `warmup absorb` reads back from the plugin's
    log (planner/review/server_logs.py, which the planner cannot import from the executor)."""
    from executor.jit_monitor import counter_names
    from planner.review.server_logs import PLUGIN_BACKENDS, PLUGIN_LINE

    for family in registry.monitored():
        m = family.monitor
        assert m.compiled in counter_names() and (m.loaded is None or m.loaded in counter_names()), family.name
        assert m.backend in PLUGIN_BACKENDS, family.name
        line = f"{m.backend} kernel compiled after warmup was sealed: k. This is a latency spike"
        assert PLUGIN_LINE.search(line)["backend"] == m.backend


def test_the_plugin_is_on_for_an_install_awaiting_the_machine_and_steps_aside_for_another_vllm(tmp_path, monkeypatch,
                                                                                              caplog):
    """Issue 43 item 6: an install made against the bundle's fingerprint turns the plugin on (to check
    the machine at load_model); with a vLLM the plugin does not support, that is one line, not a stop."""
    import sys

    from vllm_bridge import plugin as plugin_module

    from vllm_bridge.bundles import startup as bridge
    from vllm_bridge.settings import Settings

    root = tmp_path / "vllm"
    for key in ("WARMUP_PLAN", "WARMUP_BUNDLE", "WARMUP_BUNDLE_OUT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(root))
    assert not Settings.from_env(os.environ).active
    write(records.record_path(str(root), "d") + records.UNCHECKED, "x")
    settings = Settings.from_env(os.environ)
    assert settings.active and settings.machine_check and not settings.asked
    calls = []
    monkeypatch.setattr(plugin_module, "patch_worker", lambda release, s: calls.append("patch"))
    monkeypatch.setattr(bridge, "install_early", lambda path, stage=True: calls.append("early"))
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(__version__="0.26.0"))
    with caplog.at_level("WARNING", logger="vllm.warmup_planner"):
        plugin_module.register()
    assert calls == [] and len(caplog.records) == 1 and "vLLM 0.26.0 is installed: not checked" in caplog.text
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(__version__="0.25.0"))
    plugin_module.register()
    assert calls == ["patch", "early"]


def test_load_model_checks_an_install_awaiting_the_machine_before_vllm_reads_the_caches(tmp_path, monkeypatch, caplog):
    from vllm_bridge import plugin as plugin_module
    from vllm_bridge.bundles import startup as bridge
    from vllm_bridge.settings import Settings

    out = str(tmp_path / "s.warmup")
    startup.build(out, fill(tmp_path / "A"), vllm_fp(), startup.Origin())
    serve = tmp_path / "B"
    placed = startup.install(out, CacheRoots.resolve(environ(serve)), {}, str(serve / "vllm"), as_built=True)
    model = os.path.join(serve, "vllm", "modelinfos", MODELINFO)
    assert os.path.isfile(model) and placed.installed.fingerprint["gpu"] == "NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(bridge, "vllm_cache_root", lambda: str(serve / "vllm"))
    monkeypatch.setattr(bridge, "machine", lambda config, recorded=None: vllm_fp(gpu="NVIDIA H200"))
    worker = SimpleNamespace(vllm_config=None)
    with caplog.at_level("WARNING", logger="vllm.warmup_planner"):
        plugin_module._bundle_before_compile(worker, Settings(None, machine_check=True))
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"warmup-planner: bundle {out} was installed for another machine (gpu: ")
    assert not os.path.exists(model) and records.pending(str(serve / "vllm")) == []


# Relocation rule by rule (issue 44 item 7): what an install does with a path that is not the building
# machine's, the permission bits of a file it rewrites, its default (an install writes), and what
# `bundle inspect`'s summary of the relocation says.

def example_family() -> Family:
    """A family whose `.idx` files name a file by absolute path, which its loader follows."""
    return Family(name="example", label="Example", root=lambda env: None, collect=None, place=None,
                  paths=(PathRule(lambda rel, path: rel.endswith(".idx"),
                                  lambda data, reloc, final: reloc.moved(data.decode()).encode(),
                                  "its index names its file"),))


def staged_index(tmp_path, mode: int) -> tuple[str, str, Relocation]:
    """A staged `k.idx` naming the building machine's /built/ex/k.bin: (staged dir, its file, relocation)."""
    staged = tmp_path / "staged"
    staged.mkdir()
    index = staged / "k.idx"
    index.write_text("/built/ex/k.bin")
    os.chmod(index, mode)
    return str(staged), str(index), Relocation.of({"example": "/built/ex"}, {"example": str(tmp_path / "here")})


def test_a_path_under_no_building_root_is_left_as_it_is():
    relocation = Relocation.of({"triton": "/built/triton", "inductor": "/built/inductor"},
                               {"triton": "/here/triton"})
    assert relocation.moved("/site-packages/vllm/sample.py") == "/site-packages/vllm/sample.py"
    assert relocation.moved("/built/triton/ab/k.cubin") == "/here/triton/ab/k.cubin"
    assert relocation.moved("/built/inductor/fx/k") is None  # no inductor root here


def test_an_install_rewrites_by_default(tmp_path):
    staged, index, relocation = staged_index(tmp_path, 0o644)
    outcome = relocate_family(example_family(), staged, str(tmp_path / "here"), relocation)
    assert outcome.rewritten == ("k.idx",)
    assert pathlib.Path(index).read_text() == str(tmp_path / "here" / "k.bin")


def test_a_rewritten_file_keeps_its_permission_bits(tmp_path):
    staged, index, relocation = staged_index(tmp_path, 0o755)
    relocate_family(example_family(), staged, str(tmp_path / "here"), relocation)
    assert pathlib.Path(index).read_text() == str(tmp_path / "here" / "k.bin")
    assert stat.S_IMODE(os.stat(index).st_mode) == 0o755


def test_the_summary_counts_kept_files_by_reason_lists_those_left_out_and_skips_untouched_families():
    outcomes = {
        "inductor": Outcome(rewritten=("a",), kept=(("b", "comments only"), ("c", "comments only"), ("d", "debug info")),
                            dropped=(("e", "no rule"), ("f", "no rule"))),
        "triton": Outcome(),
    }
    assert summary_lines(outcomes) == [
        "inductor: 1 rewritten for the installing machine, 3 kept (no loader follows the paths), 2 not installed",
        "  kept (2): comments only",
        "  kept (1): debug info",
        "  not installed: inductor/e",
        "  not installed: inductor/f",
    ]


def standalone_artifact(entry: bytes, header: bool, autotune: bytes | None = None) -> bytes:
    """A standalone-compile artifact written by torch's own serializers, with the header field torch
    2.11 on writes first, or without it (the three fields of the torch releases before); with an
    autotune result (JSON) besides the Inductor entry where `autotune` is given."""
    from torch.compiler._cache import _serialize_single_cache
    from torch.utils._appending_byte_serializer import (
        AppendingByteSerializer,
        BytesWriter,
    )

    artifacts = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    if autotune is not None:
        artifacts.append(("autotune", [SimpleNamespace(key="zr/k.best_config", content=autotune)]))
    artifacts.append(("inductor", [SimpleNamespace(key="fkey", content=entry)]))
    writer = BytesWriter()
    if header:
        writer.write_bytes(b"CacheCompiledArtifact")
    writer.write_bytes(b"torchkey")
    writer.write_str("graphkey")
    writer.write_bytes(artifacts.to_bytes())
    return writer.to_bytes()


def inductor_entries(data: bytes, header: bool) -> list:
    """The Inductor entries of a standalone-compile artifact, read with torch's own readers."""
    from torch.compiler._cache import CacheArtifactManager
    from torch.utils._appending_byte_serializer import BytesReader

    reader = BytesReader(data)
    fields = [reader.read_bytes() for _ in range(3 if header else 2)] + [reader.read_bytes()]
    assert reader.is_finished()
    return [pickle.loads(a.content) for a in CacheArtifactManager.deserialize(fields[-1])["inductor"]]


@pytest.mark.parametrize("header", [True, False], ids=["torch-2.11-header", "no-header"])
def test_a_standalone_artifact_has_its_paths_moved_with_or_without_the_header(header):
    """Each kernel's .best_config path is moved, in the artifact torch 2.11 on writes and in the
    three-field one of the releases before; text that only mentions the path stays as it is."""
    pytest.importorskip("torch")
    entry = pickle.dumps({"best_config": "/built/inductor/zr/k.best_config",
                          "source_code": "# kernel path: /built/inductor/zr/ck.py\n"}, protocol=4)
    relocation = Relocation.of({"inductor": "/built/inductor"}, {"inductor": "/here/inductor"})
    data = rewrite_pickled(standalone_artifact(entry, header), relocation, "/here/inductor/a")
    assert inductor_entries(data, header) == [{"best_config": "/here/inductor/zr/k.best_config",
                                                "source_code": "# kernel path: /built/inductor/zr/ck.py\n"}]


def test_bytes_inside_an_artifact_that_are_no_pickle_stay_as_they_are_whatever_they_name():
    """An autotune result's JSON that names the building path is data no loader follows there: the
    Inductor entry beside it is rewritten, the JSON kept byte for byte (and the file installed)."""
    pytest.importorskip("torch")
    from torch.compiler._cache import CacheArtifactManager
    from torch.utils._appending_byte_serializer import BytesReader

    tuned = b'{"XBLOCK": 64, "found_for": "/built/inductor/zr/ck.py"}'
    entry = pickle.dumps({"best_config": "/built/inductor/zr/k.best_config"}, protocol=4)
    relocation = Relocation.of({"inductor": "/built/inductor"}, {"inductor": "/here/inductor"})
    data = rewrite_pickled(standalone_artifact(entry, True, autotune=tuned), relocation, "/here/inductor/a")
    reader = BytesReader(data)
    artifacts = CacheArtifactManager.deserialize([reader.read_bytes() for _ in range(4)][-1])
    assert [a.content for a in artifacts["autotune"]] == [tuned]
    assert [pickle.loads(a.content) for a in artifacts["inductor"]] == [{"best_config": "/here/inductor/zr/k.best_config"}]


# The placed-file checks (executor/caches/checks.py) rule by rule (issue 44 item 7): where an ELF's
# section headers end decides whether a cubin is whole, a header that is cut, 32-bit or big-endian, a
# file named like a cubin that is no ELF, an unpacked torch artifact, a file that cannot be read.

SHOFF, SHENTSIZE, SHNUM = 200, 64, 5
WHOLE = SHOFF + SHENTSIZE * SHNUM  # where the section headers end: the file's size


def elf_of(order: str = "<", size: int = WHOLE, elf_class: int = 2) -> bytes:
    """An ELF file of `size` bytes whose header places SHNUM section headers of SHENTSIZE at SHOFF."""
    ident = b"\x7fELF" + bytes([elf_class, 1 if order == "<" else 2, 1]) + bytes(9)
    header = bytearray(ident + bytes(64 - len(ident)))
    struct.pack_into(order + "Q", header, 0x28, SHOFF)
    struct.pack_into(order + "HHH", header, 0x3A, SHENTSIZE, SHNUM, SHNUM - 1)
    return bytes(header) + bytes(size - len(header))


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
def test_an_elf_is_whole_exactly_when_its_section_headers_end_inside_it(tmp_path, order):
    whole, cut = tmp_path / "whole.cubin", tmp_path / "cut.cubin"
    whole.write_bytes(elf_of(order))
    cut.write_bytes(elf_of(order, WHOLE - 1))
    assert elf_problem(str(whole)) is None
    assert elf_problem(str(cut)) == f"cut short: its section headers end at byte {WHOLE}, the file has {WHOLE - 1}"


def test_an_elf_cut_inside_its_header_or_of_32_bits_is_refused(tmp_path):
    short, elf32 = tmp_path / "short.so", tmp_path / "elf32.so"
    short.write_bytes(elf_of()[:63])
    elf32.write_bytes(elf_of(elf_class=1))
    assert elf_problem(str(short)) == "a cut or 32-bit ELF header"
    assert elf_problem(str(elf32)) == "a cut or 32-bit ELF header"


def test_a_file_named_like_a_cubin_or_a_library_that_is_no_elf_is_removed(tmp_path):
    for name in ("k.cubin", "k.so"):
        path = tmp_path / name
        path.write_bytes(b"#!/bin/sh\n" + bytes(100))
        assert by_kind(str(path)) == "not an ELF file"
        assert [(u.path, u.why, u.removes) for u in file_check(str(tmp_path), str(path))] == \
            [(str(path), "not an ELF file", True)]


def test_a_file_that_cannot_be_read_is_unreadable(tmp_path):
    missing = str(tmp_path / "gone.cubin")
    assert elf_problem(missing) == "unreadable (No such file or directory)"
    assert torch_artifact_problem(missing) == "unreadable (No such file or directory)"


@pytest.mark.parametrize("entries, whole", [(["one"], True), ([], False), (["one", "two"], False), (None, False)],
                         ids=["one-entry", "none", "two", "no-aotautograd"])
def test_an_unpacked_torch_artifact_is_whole_with_exactly_one_aotautograd_entry(tmp_path, entries, whole):
    artifact = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    artifact.mkdir()
    if entries is not None:
        (artifact / "aotautograd").mkdir()
        for entry in entries:
            (artifact / "aotautograd" / entry).mkdir()
    problem = torch_artifact_problem(str(artifact))
    assert problem == (None if whole else "an unpacked artifact without its one aotautograd entry")


def fields(*sizes: int) -> bytes:
    """Length-prefixed fields (8-byte big-endian sizes) of the given sizes, as torch frames them."""
    return b"".join(n.to_bytes(8, "big") + bytes([7]) * n for n in sizes)


def checksummed(body: bytes) -> bytes:
    return zlib.crc32(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("data", [
    checksummed(fields(21, 8, 8, 300)),       # header, torch's key, the graph's key, the artifacts
    checksummed(fields(8, 8, 300)),           # no header
    fields(8, 8, 300),                        # no checksum
    fields(*[5] * 8),                         # the most fields an artifact has
    checksummed(fields(8, 8, 0)),             # an empty last field
], ids=["header", "no-header", "no-checksum", "eight-fields", "empty-last"])
def test_a_torch_artifact_whose_fields_end_at_its_end_is_whole(tmp_path, data):
    path = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    path.write_bytes(data)
    assert torch_artifact_problem(str(path)) is None


@pytest.mark.parametrize("data", [
    checksummed(fields(21, 8, 8, 300))[:-1],  # cut inside its last field
    fields(8, 8, 300)[:-1],
    fields(8, 8, 300) + (9).to_bytes(8, "big")[:5],  # cut inside a length
    fields(8, 300),                           # too few fields
    fields(*[5] * 9),                         # more fields than an artifact has
    b"\0\0\0\0" + fields(21, 8, 8, 300),      # a checksum that does not match
], ids=["cut", "cut-no-checksum", "cut-in-a-length", "two-fields", "nine-fields", "bad-checksum"])
def test_a_cut_or_corrupted_torch_artifact_is_refused(tmp_path, data):
    path = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    path.write_bytes(data)
    assert torch_artifact_problem(str(path)) == "not a whole torch artifact (cut short or corrupted)"


def test_a_triton_group_naming_a_file_that_is_not_there_is_refused(tmp_path):
    there = tmp_path / "k.cubin"
    there.write_bytes(b"x")
    group = tmp_path / "__grp__k.json"
    group.write_text(json.dumps({"child_paths": {"k.cubin": str(there), "k.json": str(tmp_path / "k.json")}}))
    assert group_problem(str(group)) == f"lists {tmp_path / 'k.json'}, which is not there"
    (tmp_path / "k.json").write_text("{}")
    assert group_problem(str(group)) is None
