"""Which skips a test run may have (issue 37: CI's main test step passed whatever skipped).

With `--allowed-skips-only` (the README's test line, which CI runs), a skip whose reason is not
allowed here fails the run (exit 1), each named in the summary. Allowed: a test marked `gpu` (no
CUDA GPU here), a test of the vLLM environments (WARMUP_VLLM_ENVS, which CI's vLLM step sets up,
and fails on any skip there), and the optional libraries and machines the README documents as
such. Anything else, such as torch or triton missing where the test line installs them, is a
set-up that tests nothing and must not pass as green.

A pytest plugin: tests/conftest.py takes its hooks; `-p skip_policy` loads it on its own.
"""

from __future__ import annotations

import re

import pytest

# (pattern of the reason, why that skip is expected); the reason as pytest reports it, without
# its "Skipped: " prefix.
ALLOWED = (
    (r"WARMUP_VLLM_ENVS (not set|has no [0-9.]+ release) \(tests/integration/vllm_parity/setup_vllm\.sh\)",
     "the vLLM environments: CI's vLLM step sets them up and fails on any skip"),
    (r"GPU tests never run interpreted|needs (torch and )?a CUDA GPU", "the gpu marker (tests/conftest.py)"),
    (r"Triton 3\.6 interpreter: bf16 tl\.dot multiplies raw bits \(triton#11584\); GPU only",
     "a known Triton interpreter bug: the case runs on a GPU"),
    (r"FlashInfer autotune runs on SM90 and later|a CUDA device is here: the build would run",
     "depends on the GPU: none, or one of another generation"),
    (r"could not import 'flashinfer'.*|deep_gemm and flashinfer are both installed here|drawing needs matplotlib",
     "optional libraries (FlashInfer, DeepGEMM, matplotlib): the README says the tests run without them"),
    (r"could not import 'tomllib'.*", "Python 3.10, which the README supports, has no tomllib (3.11's)"),
    (r"the CNCF registry \(Debian's docker-registry\) is not installed",
     "a system package the OCI tests start (tests/executor/registry_server.py): CI installs it and sets "
     "WARMUP_REGISTRY_REQUIRED=1, which makes its absence a failure"),
)
_ALLOWED = [(re.compile(pattern), why) for pattern, why in ALLOWED]


def allowed(reason: str, markers=()) -> str | None:
    """Why a skip with this reason (of a test with these markers) is expected; None: it is not."""
    if "gpu" in markers:
        return "the gpu marker"
    reason = reason.removeprefix("Skipped: ").strip()
    return next((why for pattern, why in _ALLOWED if pattern.fullmatch(reason)), None)


def reason_of(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(getattr(longrepr, "longrepr", longrepr))


def where_of(report) -> str:
    longrepr = report.longrepr
    return f"{longrepr[0]}:{longrepr[1]}" if isinstance(longrepr, tuple) and len(longrepr) == 3 else report.nodeid


def pytest_addoption(parser):
    parser.addoption("--allowed-skips-only", action="store_true",
                     help="fail the run on a skip whose reason tests/skip_policy.py does not allow (CI's main step)")


def pytest_configure(config):
    if config.getoption("allowed_skips_only"):
        config.pluginmanager.register(Check(), "warmup-skip-policy")


class Check:
    """The skips of one run that no entry allows, then their summary and exit 1."""

    def __init__(self):
        self.unlisted: list[str] = []

    def note(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = reason_of(report)
            if allowed(reason, set(getattr(report, "keywords", None) or ())) is None:
                self.unlisted.append(f"{where_of(report)}: {reason.removeprefix('Skipped: ')}")

    def pytest_runtest_logreport(self, report):
        self.note(report)

    def pytest_collectreport(self, report):
        self.note(report)

    def pytest_terminal_summary(self, terminalreporter):
        if self.unlisted:
            terminalreporter.section("skips not allowed (tests/skip_policy.py)", red=True)
            for line in dict.fromkeys(self.unlisted):
                terminalreporter.line(line)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.unlisted and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
