"""Parity of the per-release plans with the vLLM release itself, step by step, on a generated
family of engines (tests/vllm_parity/family.py).

vLLM is not a dependency: set WARMUP_VLLM_ENVS to `VERSION=PATH[:PATH...],...` (what
tests/vllm_parity/setup_vllm.sh prints), each PATH list a sys.path holding that release and the
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

from planner.engine import engine_from_document
from planner.expand import expand
from planner.plan import load_plan
from planner.steps import CudaGraph, Decode, Gemm, GroupedGemm, Prefill, Sample, Autotune, Cleanup
from planner.yamlio import Document
from tests.vllm_parity.family import family

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = ("capture_sizes", "decode_graphs", "warmup_kernels", "deep_gemm", "moe_backend", "flashinfer_tokens",
          "lookahead")


def releases() -> dict:
    """{version: sys.path entries} from WARMUP_VLLM_ENVS."""
    spec = os.environ.get("WARMUP_VLLM_ENVS", "")
    out = {}
    for item in filter(None, spec.split(",")):
        version, _, paths = item.partition("=")
        out[version] = paths
    return out


RELEASES = releases()
ENGINES = family()
pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/vllm_parity/setup_vllm.sh)")


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def release(request):
    """(version, {engine name: what vLLM computes}) for one installed release."""
    version = request.param
    engines = {name: engine_from_document(Document(data=data, file=f"<{name}>")) for name, data in ENGINES.items()}
    payload = [{"name": n, "data": e.data, "names": e.expression_names()} for n, e in engines.items()]
    env = {**os.environ, "PYTHONPATH": RELEASES[version], "VLLM_LOGGING_LEVEL": "ERROR"}
    run = subprocess.run([sys.executable, os.path.join(HERE, "oracle.py")], input=json.dumps(payload),
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"].startswith(version), f"{RELEASES[version]} holds vLLM {facts['version']}"
    return version, engines, dict(zip(engines, facts["engines"]))


def plan_facts(version: str, engine) -> dict:
    """The same facts, read from the plan vllm-VERSION expanded for the engine."""
    steps = expand(load_plan(f"vllm-{version}"), engine).steps
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
    the greedy pass is named so (planner/stages/batches.py)."""
    return 0.0 if "/greedy-" in step.id else 0.9


def compare(version: str, engine, vllm: dict) -> dict:
    """check -> None (agrees), 'n/a', or what differs."""
    plan, names = plan_facts(version, engine), engine.expression_names()
    out = dict.fromkeys(CHECKS)
    if plan["capture_sizes"] is None:
        out["capture_sizes"] = "n/a"
    elif vllm["capture"]["sizes"] != plan["capture_sizes"]:
        out["capture_sizes"] = (vllm["capture"]["sizes"], plan["capture_sizes"])
    if vllm["capture"]["decode"] != plan["decode_graphs"]:
        out["decode_graphs"] = (vllm["capture"]["decode"], plan["decode_graphs"])
    out["warmup_kernels"] = warmup_diff(vllm["warmup_kernels"], plan["warmup_kernels"])
    out["deep_gemm"] = deep_gemm_diff(version, vllm["deep_gemm"], plan["deep_gemm"], names)
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


def deep_gemm_diff(version: str, vllm: dict, plan: dict, names: dict):
    if names["device_capability"] < 90:
        return "n/a"
    if version == "0.25":
        # 0.25's warmup adds N % 128 to the selection (_fp8_linear_may_use_deep_gemm, read: it needs a
        # loaded layer); 0.33's warms every linear the selection gave DeepGEMM.
        vllm = {s: m for s, m in vllm.items() if int(s.split("x")[0]) % 128 == 0}
    return None if vllm == plan else (sorted(vllm), sorted(plan))


def moe_diff(engine, backends: list, grouped: bool):
    if not engine.data["model"]["moe"] or engine.expression_names()["device_capability"] != 90:
        return "n/a"
    # DeepGEMM's grouped warmup runs only where the oracle puts DeepGEMM before Triton and FI CUTLASS.
    first = next(b for b in backends if b in ("TRITON", "FLASHINFER_CUTLASS", "DEEPGEMM"))
    return None if grouped == (first == "DEEPGEMM") else (first, grouped)


def test_every_engine_of_the_family_agrees(release):
    version, engines, facts = release
    table = {name: compare(version, engines[name], facts[name]) for name in engines}
    failures = {n: {c: v for c, v in row.items() if v not in (None, "n/a")} for n, row in table.items()}
    failures = {n: f for n, f in failures.items() if f}
    write_table(version, table)
    summary = {n: {c: str(v)[:300] for c, v in f.items()} for n, f in failures.items()}
    assert not failures, json.dumps(summary)[:6000]


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
