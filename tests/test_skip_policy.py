"""CI's main test step fails on a skip whose reason is not allowed (tests/skip_policy.py; issue 37:
it passed whatever skipped): the policy's list, and real pytest runs with --allowed-skips-only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from skip_policy import allowed

HERE = os.path.dirname(os.path.abspath(__file__))

TESTS = '''
import pytest

def test_runs():
    pass

@pytest.mark.gpu
def test_on_a_gpu():
    pytest.skip("needs a CUDA GPU")

def test_vllm():
    pytest.skip("WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")

def test_torch():
    pytest.importorskip("a_library_nobody_installed")

@pytest.mark.xfail(reason="known")
def test_known():
    assert False
'''


def run(tmp_path, body: str, *options) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: on a GPU\n")
    (tmp_path / "test_some.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "skip_policy", "-p", "no:cacheprovider",
                           *options, str(tmp_path / "test_some.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_skip_off_the_list_fails_the_run_and_is_named(tmp_path):
    out = run(tmp_path, TESTS, "--allowed-skips-only")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "skips not allowed (tests/skip_policy.py)" in out.stdout
    named = out.stdout.split("skips not allowed")[1]
    assert "could not import 'a_library_nobody_installed'" in named
    assert "CUDA GPU" not in named and "WARMUP_VLLM_ENVS" not in named and "known" not in named


def test_allowed_skips_pass_and_without_the_option_nothing_changes(tmp_path):
    allowed_only = TESTS.replace('pytest.importorskip("a_library_nobody_installed")', "pass")
    out = run(tmp_path, allowed_only, "--allowed-skips-only")
    assert out.returncode == 0 and "2 skipped" in out.stdout, out.stdout
    assert run(tmp_path, TESTS).returncode == 0                     # a plain run: skips are not judged


def test_a_module_skipped_at_collection_is_judged_too(tmp_path):
    body = 'import pytest\npytest.importorskip("a_library_nobody_installed")\n\ndef test_x():\n    pass\n'
    out = run(tmp_path, body, "--allowed-skips-only")
    assert out.returncode == 1 and "a_library_nobody_installed" in out.stdout.split("skips not allowed")[1]


@pytest.mark.parametrize("reason, markers, ok", [
    ("Skipped: WARMUP_VLLM_ENVS has no 0.25 release (tests/integration/vllm_parity/setup_vllm.sh)", (), True),
    ("GPU tests never run interpreted", (), True),
    ("anything at all", ("gpu",), True),
    ("could not import 'flashinfer': No module named 'flashinfer'", (), True),
    ("could not import 'torch': No module named 'torch'", (), False),     # the test line installs it
    ("no pool here: device cpu", (), False),
    ("WARMUP_VLLM_ENVS not set, and more", (), False),                    # the whole reason must match
])
def test_the_list(reason, markers, ok):
    assert (allowed(reason, markers) is not None) == ok
