"""The planner never imports the executor, torch or triton; the executor's entry points import
neither torch nor triton (backends and kernels load lazily, inside a run)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from execlib import ROOT

HEAVY = ("torch", "triton", "deep_gemm", "flashinfer")


def imported_after(statement: str) -> list[str]:
    code = (f"import sys\n{statement}\n"
            f"print(' '.join(m for m in ('executor',) + {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize("statement", [
    "import planner",
    "import planner.cli, planner.plan.expand, planner.plan.loading, planner.plan.authored, planner.engine.config",
    "import planner.cli; planner.cli.build_parser(with_plugins=False)",
])
def test_planner_imports_no_executor_torch_or_triton(statement):
    assert imported_after(statement) == []


def test_kernel_model_imports_neither_planner_nor_executor():
    code = ("import sys, kernel_model.deep_gemm, kernel_model.gemm_tables, kernel_model.runner_kernels, "
            "kernel_model.specialization, kernel_model.triton_kernels\n"
            "print(' '.join(m for m in sys.modules if m.split('.')[0] in "
            "('planner', 'executor', 'torch', 'triton', 'yaml', 'jsonschema')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


@pytest.mark.parametrize("module", [
    "executor", "executor.cli", "executor.registry", "executor.run", "executor.jit_monitor",
    "executor.report", "executor.progress", "executor.verify", "executor.autotune",
    "executor.backends.triton", "executor.backends.deep_gemm", "executor.backends.flashinfer",
    "executor.backends.torch_backend", "executor.backends.null",
])
def test_executor_modules_import_no_torch_or_triton(module):
    assert [m for m in imported_after(f"import {module}") if m != "executor"] == []


def test_execute_help_imports_no_torch():
    code = ("import sys, contextlib, io\nfrom executor.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['execute', '--help'])\n"
            "    except SystemExit: pass\n"
            "print('torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("statement", [
    "import executor.worker_preload",  # what the precompile pool's fork server imports
    "import executor.backends.triton_compile; executor.backends.triton_compile.TritonCompileOnly('cuda').available()",
    "from executor.kernels.jit import stand_in, fp8_gemm, grouped_gemm, prefill_attention",
    "import executor.runner.kernels",
])
def test_precompile_workers_import_triton_but_not_torch(statement):
    pytest.importorskip("triton")
    assert "torch" not in imported_after(statement)
