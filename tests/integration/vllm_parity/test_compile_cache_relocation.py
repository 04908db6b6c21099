"""vLLM's own loader is the judge of a bundle's torch.compile cache on a machine that never built it
(issue 43 items 2, 3 and 5), with each release of WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh).

On CPU, vLLM's CompilerManager compiles a small graph into a cache in directory A (its artifact
and ``vllm_compile_cache.py``, whose handle names A, as vLLM 0.25 writes it; tests/integration/vllm_parity/
compile_cache_probe.py). The cache is packed as a start-up bundle, A is deleted, and the bundle is
installed into B; then vLLM's CompilerManager reads B in a fresh process. Variants feed it what a
building machine can pack: an artifact the cache names but the bundle lacks, one cut short, a handle
naming a path outside the building caches. Each must load, or be not found (vLLM compiles that graph
again), and never raise. The controls show the test can fail: the same files copied without the
install make vLLM 0.25 raise FileNotFoundError on A's path (the bug of issue 43) and make both
releases raise on the cut artifact.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

from executor.bundle import startup
from executor.caches.registry import CacheRoots
from tests.integration.vllm_parity.test_parity import RELEASES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROBE = os.path.join(ROOT, "tests", "integration", "vllm_parity", "compile_cache_probe.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "executor"))  # its modules import each other by name
from test_startup_bundle import vllm_fp  # noqa: E402

HASHED = os.path.join("torch_compile_cache", "0123456789", "rank_0_0", "backbone")  # as vLLM names it
ARTIFACT = "artifact_compile_range_1_8_subgraph_0"
pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


def probe(version: str, action: str, dirs: list, inductor: str):
    env = {**os.environ, "PYTHONPATH": RELEASES[version], "TORCHINDUCTOR_CACHE_DIR": inductor,
           "VLLM_LOGGING_LEVEL": "ERROR"}
    run = subprocess.run([sys.executable, PROBE, action, *map(str, dirs)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def built(request, tmp_path_factory):
    """(release, work directory, the pristine cache A as vLLM wrote it, kept aside)."""
    version = request.param
    work = tmp_path_factory.mktemp(f"vllm-{version}")
    made = probe(version, "build", [work / "A" / "vllm" / HASHED], str(work / "A" / "inductor"))
    assert made == {"files": [ARTIFACT, "vllm_compile_cache.py"], "matches": True}
    shutil.copytree(work / "A", work / "pristine")
    return version, work


def cache_file(base) -> str:
    return os.path.join(base, "vllm", HASHED, "vllm_compile_cache.py")


def truncate(base) -> None:
    path = os.path.join(base, "vllm", HASHED, ARTIFACT)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


def lose_artifact(base) -> None:
    os.unlink(os.path.join(base, "vllm", HASHED, ARTIFACT))


def foreign_handle(base) -> None:
    """The handle names a path under no cache the bundle was packed from."""
    cache = ast.literal_eval(open(cache_file(base)).read())
    for value in cache.values():
        value["graph_handle"] = (value["graph_handle"][0], f"/elsewhere/{value['graph_handle'][0]}")
    open(cache_file(base), "w").write(repr(cache))


VARIANTS = {"whole": None, "missing": lose_artifact, "truncated": truncate, "foreign": foreign_handle}


def roots_in(base) -> CacheRoots:
    return CacheRoots({"torch_compile": str(base / "vllm" / "torch_compile_cache"), "inductor": str(base / "inductor")})


def bundle_then_delete_a(work, name: str, change) -> str:
    """A restored as vLLM wrote it, changed, packed, then deleted (as on every other machine)."""
    a = work / "A"
    shutil.rmtree(a, ignore_errors=True)
    shutil.copytree(work / "pristine", a)
    if change is not None:
        change(a)
    out = str(work / f"{name}.warmup")
    startup.build(out, roots_in(a), vllm_fp(), startup.Origin())
    shutil.rmtree(a)
    return out


def test_vllms_loader_takes_a_relocated_cache_or_does_not_find_it_never_crashes(built):
    version, work = built
    installs, lines = {}, {}
    for name, change in VARIANTS.items():
        out = bundle_then_delete_a(work, name, change)
        b = work / f"B-{name}"
        placed = startup.install(out, roots_in(b), vllm_fp(), str(b / "vllm"))
        installs[name], lines[name] = b, placed.problem_lines()
    # controls: the whole cache and the cut one copied as they are, A gone, no install
    for name, change in (("raw", None), ("raw-truncated", truncate)):
        shutil.copytree(work / "pristine", work / "A")
        if change:
            change(work / "A")
        shutil.copytree(work / "A" / "vllm", work / name / "vllm")
        shutil.rmtree(work / "A")
        installs[name] = work / name

    order = ["raw-truncated", "missing", "truncated", "foreign", "raw"]  # what loads last (0.33 loads "raw")
    seen = dict(zip(order, probe(version, "load", [os.path.dirname(cache_file(installs[n])) for n in order],
                                 str(work / "inductor-1"))))
    seen["whole"] = probe(version, "load", [os.path.dirname(cache_file(installs["whole"]))], str(work / "inductor-2"))[0]

    assert seen["whole"] == {"loaded": True, "matches": True}, seen
    assert seen["missing"] == seen["truncated"] == seen["foreign"] == {"loaded": False}, seen
    assert "error" in seen["raw-truncated"]  # vLLM does not survive a cut artifact: the check is what saves it
    if version == "0.25":  # vLLM 0.25 opens the handle's absolute path: the building machine's
        assert seen["raw"]["error"].startswith("FileNotFoundError") and str(work / "A") in seen["raw"]["error"]
    else:                  # 0.33 opens <its directory>/<key> (vLLM PR #52142)
        assert seen["raw"] == {"loaded": True, "matches": True}

    # the handle of the installed cache names B, and each variant is one line naming its entry
    handle = next(iter(ast.literal_eval(open(cache_file(installs["whole"])).read()).values()))["graph_handle"]
    assert handle == (ARTIFACT, os.path.join(os.path.dirname(cache_file(installs["whole"])), ARTIFACT))
    assert lines["whole"] == []
    for name, why in (("missing", f"its artifact {ARTIFACT} is not here"), ("foreign", "outside this cache")):
        assert len(lines[name]) == 1 and why in lines[name][0] and "vllm_compile_cache.py removed" in lines[name][0]
    cut, taken = lines["truncated"]  # the cut artifact cannot be relocated: left out, then its graph
    assert cut.startswith(f"torch_compile/{HASHED.split(os.sep, 1)[1]}/{ARTIFACT} not installed: ") and \
        "cannot be rewritten" in cut
    assert f"its artifact {ARTIFACT} is not here" in taken and "vllm_compile_cache.py removed" in taken
