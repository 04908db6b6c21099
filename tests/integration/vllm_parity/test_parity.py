"""Parity of the per-release plans with the vLLM release itself, step by step, on a generated
family of engines (tests/integration/vllm_parity/family.py).

What the release decides at start-up is taken from its own functions too (choices.py): the model
runner (VllmConfig.use_v2_model_runner), each block-FP8 linear's kernel (choose_scaled_mm_linear_kernel,
with vLLM 0.25.0's FlashInfer 0.6.13 installed beside it, and with it turned off), which linears its
DeepGEMM warmup then takes, V1's capture sizes, 0.25's FlashInfer autotune cache. Each is compared
with the planner's rule (planner/engine/vllm_choices.py), and the plan is expanded for the engine as
`--from-vllm` would write it (vLLM's kernels, the planner's `auto` runner).

Why these tests passed while the 0.25 plan was wrong on 3 of 4 shipped engines (issue 24): the
oracle answered the questions the plan asked instead of the ones vLLM asks. It called
`should_use_deepgemm_for_fp8_linear(..., supports_deep_gemm=True)`, which says whether DeepGEMM
could take a shape, not which kernel vLLM selects (FlashInfer's, first in the list where
FlashInfer is installed, which the warmup's isinstance test then refuses), in an environment with
no FlashInfer and a DeepGEMM that cannot import on CPU; it called Model Runner V2's
`warmup_kernels` and `CudaGraphManager` for every engine without asking `use_v2_model_runner`,
so V1 engines (Qwen3-MoE, DeepSeek-V3, Mixtral, ngram, suffix, pooling) were compared with V2's
behaviour on both sides; and FlashInfer's cache mode was never compared. The family had no named
MoE architecture and no world above one rank for 0.25's autotune.

vLLM is not a dependency: set WARMUP_VLLM_ENVS to `VERSION=PATH[:PATH...],...` (what
tests/integration/vllm_parity/setup_vllm.sh prints), each PATH list a sys.path holding that release and the
pure packages its imports need. Without it these tests skip. For each release, one subprocess
(oracle.py) imports vLLM and calls its own functions on every engine; this process expands the
plan and compares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.engine.config import engine_from_document
from planner.engine.releases import VLLM_RELEASES, model_runner, sampler, supported
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.steps import CudaGraph, Decode, Gemm, GroupedGemm, Prefill, Sample, Autotune, Cleanup
from planner.yamlio import Document
from tests.integration.vllm_parity.family import family

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = ("model_runner", "linear_kernels", "capture_sizes", "decode_graphs", "warmup_kernels", "deep_gemm",
          "deep_gemm_without_flashinfer", "moe_backend", "flashinfer_tokens", "flashinfer_cache", "lookahead",
          "sampler")


def env_key(version: str) -> str:
    """'0.25.0' -> '0.25': the name setup_vllm.sh gives a release in WARMUP_VLLM_ENVS."""
    return version[:-2] if version.endswith(".0") else version


def installed_envs(spec: str) -> dict:
    """{name: sys.path entries} of a WARMUP_VLLM_ENVS value."""
    items = (item.partition("=") for item in filter(None, spec.split(",")))
    return {name: paths for name, _, paths in items}


def releases(spec: str | None = None) -> dict:
    """{name: sys.path entries} for each row of the release table (planner/engine/releases.py) that
    WARMUP_VLLM_ENVS installs: the table is the list of releases checked, the env only says where."""
    envs = installed_envs(os.environ.get("WARMUP_VLLM_ENVS", "") if spec is None else spec)
    return {env_key(v): envs[env_key(v)] for v in supported() if env_key(v) in envs}


def not_installed(spec: str) -> list:
    """The table's releases a WARMUP_VLLM_ENVS value lacks: rows nothing checks (rerun setup_vllm.sh)."""
    return [v for v in supported() if env_key(v) not in installed_envs(spec)]


def row_of(name: str):
    """The release row of a WARMUP_VLLM_ENVS name ('0.25')."""
    return next(VLLM_RELEASES[v] for v in supported() if env_key(v) == name)


RELEASES = releases()
ENGINES = family()
pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def release(request):
    """(version, {engine name: what vLLM computes}) for one installed release."""
    version = request.param
    engines = {name: engine_from_document(Document(data=data, file=f"<{name}>")) for name, data in ENGINES.items()}
    payload = [{"name": n, "data": e.data, "names": e.expression_names()} for n, e in engines.items()]
    # VLLM_HAS_FLASHINFER_CUBIN stands for the flashinfer-cubin package vLLM 0.25.0 requires (vLLM only
    # looks for it; 458 MB of prebuilt kernels are not installed): setup_vllm.sh says why.
    env = {**os.environ, "PYTHONPATH": RELEASES[version], "VLLM_LOGGING_LEVEL": "ERROR",
           "VLLM_HAS_FLASHINFER_CUBIN": "1"}
    env.pop("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER", None)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    run = subprocess.run([sys.executable, os.path.join(HERE, "oracle.py")], input=json.dumps(payload),
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"].startswith(version), f"{RELEASES[version]} holds vLLM {facts['version']}"
    return version, engines, dict(zip(engines, facts["engines"]))


def with_kernels(engine, kernels: dict):
    """The engine as `--from-vllm` writes it where vLLM selected `kernels` ({layer: kernel})."""
    data = json.loads(json.dumps(engine.data))
    for layer in data["model"]["linear"]:
        if layer["name"] in kernels:
            layer["kernel"] = kernels[layer["name"]]
    return engine_from_document(Document(data=data, file=engine.file))


def plan_facts(version: str, engine) -> dict:
    """The same facts, read from the release row's plan expanded for the engine."""
    steps = expand(load_plan(row_of(version).plan), engine).steps
    graphs = [s for s in steps if isinstance(s, CudaGraph)]
    g = graphs[0] if graphs else None
    return {
        # FULL_DECODE_ONLY captures no mixed graphs: its sizes show as decode graphs only.
        "capture_sizes": sorted(g.sizes) if g and g.sizes else ([] if not g else None),
        "decode_graphs": sorted(g.uniform_decode_sizes) if g else [],
        "warmup_kernels": [batch_fact(s) for s in steps if s.stage == "warmup_kernels"],
        "deep_gemm": {f"{s.n}x{s.k}": list(s.m_values) for s in steps if isinstance(s, Gemm)},
        "grouped": any(isinstance(s, GroupedGemm) for s in steps),
        "flashinfer_tokens": [s.num_tokens for s in steps if isinstance(s, Autotune)],
        "flashinfer_cache": [s.cache for s in steps if isinstance(s, Autotune)],
        "order": [s.stage for s in steps if s.stage in ("warmup_kernels", "cudagraph")],
    }


def batch_fact(step) -> dict:
    """A warmup_kernels step in the oracle's form (what vLLM hands execute_model / sample_tokens)."""
    if isinstance(step, Prefill):
        return {"kind": "prefill", "temperature": float(step_temperature(step)),
                "requests": [[r.req_id, r.num_scheduled_tokens, [list(b) for b in r.block_ids]] for r in step.requests]}
    if isinstance(step, Decode):
        return {"kind": "decode", "requests": [
            [r.req_id, r.num_computed_tokens, r.num_scheduled_tokens, r.num_spec_tokens,
             None if r.new_block_ids is None else [list(b) for b in r.new_block_ids]] for r in step.requests]}
    if isinstance(step, Sample):
        g = step.grammar_bitmask
        return {"kind": "sample", "bitmask": [g.num_rows, g.width] if g else None}
    assert isinstance(step, Cleanup)
    return {"kind": "cleanup", "finished": sorted(step.finished_req_ids)}


def step_temperature(step) -> float:
    """The temperature of a prefill's requests: the sample step after it carries the pass's params;
    the greedy pass is named so (planner/plan/stages/batches.py)."""
    return 0.0 if "/greedy-" in step.id else 0.9


def compare(version: str, engine, vllm: dict) -> dict:
    """check -> None (agrees), 'n/a', or what differs."""
    out = dict.fromkeys(CHECKS)
    out.update(compare_choices(version, engine, vllm))
    plan = plan_facts(version, with_kernels(engine, vllm["linear_kernels"]))
    names = engine.expression_names()
    if plan["capture_sizes"] is None:
        out["capture_sizes"] = "n/a"
    elif vllm["capture"]["sizes"] != plan["capture_sizes"]:
        out["capture_sizes"] = (vllm["capture"]["sizes"], plan["capture_sizes"])
    if vllm["capture"]["decode"] != plan["decode_graphs"]:
        out["decode_graphs"] = (vllm["capture"]["decode"], plan["decode_graphs"])
    out["warmup_kernels"] = warmup_diff(vllm["warmup_kernels"], plan["warmup_kernels"])
    out["deep_gemm"] = deep_gemm_diff(vllm["deep_gemm"], plan["deep_gemm"], names)
    without = plan_facts(version, with_kernels(engine, vllm["linear_kernels_without_flashinfer"]))
    out["deep_gemm_without_flashinfer"] = deep_gemm_diff(vllm["deep_gemm_without_flashinfer"],
                                                         without["deep_gemm"], names)
    if vllm["flashinfer_cache"] is None or names["device_capability"] < 90:
        out["flashinfer_cache"] = "n/a"
    elif [vllm["flashinfer_cache"]] != plan["flashinfer_cache"]:
        out["flashinfer_cache"] = (vllm["flashinfer_cache"], plan["flashinfer_cache"])
    out["moe_backend"] = moe_diff(engine, vllm["moe_backends"], plan["grouped"])
    if vllm["flashinfer_tokens"] is None or names["device_capability"] < 90:
        out["flashinfer_tokens"] = "n/a"
    elif vllm["flashinfer_tokens"] != plan["flashinfer_tokens"]:
        out["flashinfer_tokens"] = (vllm["flashinfer_tokens"], plan["flashinfer_tokens"])
    if vllm["lookahead"] is None:
        out["lookahead"] = "n/a"
    elif vllm["lookahead"] != names["num_lookahead_tokens"]:
        out["lookahead"] = (vllm["lookahead"], names["num_lookahead_tokens"])
    return out


def warmup_diff(vllm, plan):
    if vllm is None:
        return "n/a"  # pooling: vLLM needs the model's pooler; the plan's prefill + cleanup is not compared
    if len(vllm) != len(plan):
        return f"{len(vllm)} steps in vLLM, {len(plan)} in the plan"
    for i, (a, b) in enumerate(zip(vllm, plan)):
        if a != b:
            return f"step {i} ({a['kind']}) differs"
    return None


def compare_choices(version: str, engine, vllm: dict) -> dict:
    """The release's own start-up choices against its row's rules (planner/engine/releases.py)."""
    data, out, row = engine.data, {}, row_of(version)
    runner = model_runner(row.version, engine.facts)[0]
    out["model_runner"] = None if runner == vllm["model_runner"] else (vllm["model_runner"], runner)
    capability, dtype = data["device"]["capability"], data["model"]["dtype"]
    rules = {flashinfer: {layer["name"]: row.linear_kernel(layer, dtype, capability, flashinfer)
                          for layer in data["model"]["linear"] if layer.get("kernel")}
             for flashinfer in (True, False)}
    differs = [(vllm[key], rules[flashinfer]) for key, flashinfer in (
        ("linear_kernels", vllm["flashinfer"]), ("linear_kernels_without_flashinfer", False))
        if vllm[key] != rules[flashinfer]]
    out["linear_kernels"] = differs[0] if differs else ("n/a" if not vllm["linear_kernels"] else None)
    chosen = sampler(row.version, engine.facts)[0]
    out["sampler"] = "n/a" if vllm["sampler"] is None else (None if chosen == vllm["sampler"] else (vllm["sampler"], chosen))
    return out


def deep_gemm_diff(vllm: dict, plan: dict, names: dict):
    if names["device_capability"] < 90:
        return "n/a"
    return None if vllm == plan else (sorted(vllm), sorted(plan))


def moe_diff(engine, backends: list, grouped: bool):
    if not engine.data["model"]["moe"] or engine.expression_names()["device_capability"] != 90:
        return "n/a"
    # DeepGEMM's grouped warmup runs only where the oracle puts DeepGEMM before Triton and FI CUTLASS.
    first = next(b for b in backends if b in ("TRITON", "FLASHINFER_CUTLASS", "DEEPGEMM"))
    return None if grouped == (first == "DEEPGEMM") else (first, grouped)


def test_the_envs_install_every_release_of_the_table():
    """A row with no env would be supported and never checked: setup_vllm.sh installs every row."""
    spec = os.environ["WARMUP_VLLM_ENVS"]
    assert not_installed(spec) == [], f"rerun tests/integration/vllm_parity/setup_vllm.sh: {spec!r} lacks them"
    assert sorted(installed_envs(spec)) == sorted(RELEASES), "an env of a release with no row"


def test_every_engine_of_the_family_agrees(release):
    version, engines, facts = release
    table = {name: compare(version, engines[name], facts[name]) for name in engines}
    failures = {n: {c: v for c, v in row.items() if v not in (None, "n/a")} for n, row in table.items()}
    failures = {n: f for n, f in failures.items() if f}
    write_table(version, table)
    summary = {n: {c: str(v)[:300] for c, v in f.items()} for n, f in failures.items()}
    assert not failures, json.dumps(summary)[:6000]


def test_the_family_reaches_both_runners_and_the_installed_kernels(release):
    """The comparison above means something only where vLLM's own answers vary: both model runners
    on each release, and on 0.25 (FlashInfer 0.6.13 installed beside it, as its wheel brings it)
    FlashInfer's block-FP8 kernel selected through FlashInfer's real exports, DeepGEMM's without it."""
    version, engines, facts = release
    assert {f["model_runner"] for f in facts.values()} == {"v1", "v2"}
    kernels = {k for f in facts.values() for k in f["linear_kernels"].values()}
    without = {k for f in facts.values() for k in f["linear_kernels_without_flashinfer"].values()}
    assert "deep_gemm" in without and "flashinfer_deep_gemm" not in without
    if version == "0.25":
        sm90 = {n for n, e in engines.items() if e.expression_names()["device_capability"] == 90}
        assert sm90 and {n for n, f in facts.items() if f["flashinfer"]} == sm90  # its block GEMM is SM 9.0's
        assert "flashinfer_deep_gemm" in kernels
        assert {f["flashinfer_cache"] for f in facts.values()} == {"memory", "persistent"}
        assert "flashinfer" in {f["sampler"] for f in facts.values()}  # vLLM's own sampler choice ran


def test_033_orders_warmup_kernels_before_capture(release):
    version, engines, _ = release
    order = plan_facts(version, engines["base"])["order"]
    assert (order[-1] == "cudagraph") == (version == "0.33")


def write_table(version: str, table: dict) -> None:
    """The parity table (engines x checks) for bench/RESULTS.md, when WARMUP_PARITY_TABLE names a folder."""
    folder = os.environ.get("WARMUP_PARITY_TABLE")
    if not folder:
        return
    rows = [f"| engine | {' | '.join(CHECKS)} |", "|---" * (len(CHECKS) + 1) + "|"]
    for name, row in table.items():
        cells = ["n/a" if v == "n/a" else ("pass" if v is None else "FAIL") for v in row.values()]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    passed = {c: sum(1 for row in table.values() if row[c] is None) for c in CHECKS}
    compared = {c: sum(1 for row in table.values() if row[c] != "n/a") for c in CHECKS}
    rows.append("| **passed** | " + " | ".join(f"{passed[c]}/{compared[c]}" for c in CHECKS) + " |")
    with open(os.path.join(folder, f"parity-{version}.md"), "w") as f:
        f.write("\n".join(rows) + "\n")
