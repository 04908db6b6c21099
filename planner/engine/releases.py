"""The vLLM releases this project supports: one row per release, the one table.

A supported release is an exact vLLM version whose warmup a built-in plan follows (its names
were read in that release's source; tests/integration/vllm_parity checks the plans and this row's rules
against it). Supporting a new release is its row here plus its plan file (plans/vllm-X.Y.yaml,
`vllm_release: "X.Y.0"`). Everything that names supported releases reads this table:

- the plan schema's `vllm_release` (planner/plan/authored.py refuses a release with no row),
- the start-up choices a plan of the release makes for an engine's `auto` (model_runner, sampler
  below; the rules themselves are planner/engine/vllm_choices.py's),
- what the release's model code builds where releases differ (`warmup engine --from-hf
  --vllm-release`, and the installed release for `--from-vllm` and the plugin: planner/engine/hf
  applies the rows' model-build facts, each rule there citing vLLM's code),
- the vLLM plugin's release lookup (vllm_bridge/releases.py keys the names it patches by the
  row's version, and the plugin refuses any other version), `warmup engine --from-vllm`,
- tests/integration/vllm_parity/setup_vllm.sh (`python -m planner.engine.releases setup`) and the parity tests,
- `warmup --version`, and pyproject's `vllm` extra, which pins the newest release
  (tests/planner/test_releases.py checks it).
The planner only names the releases; it never imports vLLM or the bridge.
"""

from __future__ import annotations

import re
import sys
from typing import Callable, NamedTuple

from .vllm_choices import (default_linear_kernel, flashinfer_sampler_025, flashinfer_sampler_033, v1_reason_025,
                           v1_reason_033)


class VllmRelease(NamedTuple):
    """What the project knows of one vLLM release (a named tuple: the table is on the plan path)."""

    version: str                # the exact vLLM version the plugin accepts ("0.33.0": 0.33.1 is another)
    plan: str                   # the built-in plan (or a plan file) that models its warmup
    v1_reason: Callable         # model-runner rule: (EngineFacts) -> why it runs V1 for `auto` ('' for V2)
    linear_kernel: Callable     # block-FP8 linear-kernel rule: (layer, dtype, capability, flashinfer) -> kernel
    sampler: Callable           # top-k/top-p sampler rule for `auto`: (version, EngineFacts) -> (kernel, why)
    flashinfer: str | None = None  # the flashinfer-python its wheel pins: setup_vllm.sh installs it beside vLLM
    # kernel -> the upstream fix, where this release's own DeepGEMM warmup leaves the kernel's M-values cold
    upstream_fixes: tuple = ()
    # start-up fixes later releases made that this one lacks, which the plugin applies (vllm_bridge/fixes.py)
    missing_start_up_fixes: tuple = ()
    # Model-build facts where releases differ (planner/engine/hf/attention.py, quantization.py):
    # the architectures whose sliding layers the model code gives sliding_window + 1 tokens
    sliding_window_plus_one: tuple = ()
    # Fp8MoEMethod refines checkpoint blocks a tensor-parallel shard splits to finer square blocks
    # (fused_moe/oracle/fp8.py, refine_fp8_moe_block_shape); without it vLLM refuses that shard
    fp8_moe_block_refine: bool = False


def _rows(*rows: VllmRelease) -> dict:
    return {row.version: row for row in rows}


# Oldest first. The same linear-kernel rule in both: choose_scaled_mm_linear_kernel's CUDA list has
# one order in 0.25.0 and 0.33.0 (planner/engine/vllm_choices.py).
VLLM_RELEASES = _rows(
    VllmRelease("0.25.0", "vllm-0.25", v1_reason_025, default_linear_kernel, flashinfer_sampler_025,
                flashinfer="0.6.13",  # Requires-Dist: flashinfer-python==0.6.13
                upstream_fixes=(("flashinfer_deep_gemm", "vLLM PR #49467, after 0.25"),),
                # its Model Runner V2 captures CUDA graphs with the garbage collector running
                missing_start_up_fixes=("gc_freeze_capture",)),
    VllmRelease("0.33.0", "vllm-0.33", v1_reason_033, default_linear_kernel, flashinfer_sampler_033,
                # commandr.py CohereAttention: Cohere2's sliding layers see [pos - sliding_window, pos]
                sliding_window_plus_one=("Cohere2ForCausalLM",),
                # quantization/fp8.py Fp8MoEMethod.__init__ -> resolve_fp8_moe_weight_block_shape
                fp8_moe_block_refine=True),
)


def release(version: str | None) -> VllmRelease | None:
    """The row of a plan's `vllm_release` (None: a plan of no release, or a version with no row)."""
    return VLLM_RELEASES.get(version) if version else None


# A vLLM version's release: its leading MAJOR.MINOR.PATCH. What follows is the build's ('+cu129'
# in a server log's version line), not another release.
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_release(version: str) -> tuple[int, int, int]:
    """'0.33.0' -> (0, 33, 0), '0.25.0+cu129' -> (0, 25, 0): the release a vLLM version names, for
    ordering and comparing releases. ValueError where the version does not start with one."""
    match = _RELEASE.match(version)
    if match is None:
        raise ValueError(f"vLLM version {version!r} does not start with MAJOR.MINOR.PATCH, such as '0.33.0'")
    return int(match[1]), int(match[2]), int(match[3])


def supported() -> list[str]:
    """The supported versions, oldest first."""
    return sorted(VLLM_RELEASES, key=parse_release)


def newest() -> str:
    """The newest supported release (what the `vllm` extra installs)."""
    return supported()[-1]


def model_runner(version: str | None, engine) -> tuple[str, str]:
    """('v1' or 'v2', why) for the engine under vLLM `version` (None: a plan of no release, V2).
    An engine that names its runner keeps it; `auto` takes the release row's rule."""
    chosen = engine.model.model_runner
    if chosen != "auto":
        return chosen, f"the engine config sets model.model_runner: {chosen}"
    row = release(version)
    if row is None:
        return "v2", "Model Runner V2 (the plan names no release)"
    why = row.v1_reason(engine)
    return ("v1", f"vLLM {version} runs the V1 model runner: {why}") if why else ("v2", f"vLLM {version}'s default")


def sampler(version: str | None, engine) -> tuple[str, str]:
    """('flashinfer' or 'triton', why): vLLM's top-k/top-p sampler for the engine. An engine that
    names it keeps it; `auto` is the release row's rule; a plan of no release: triton (no FlashInfer
    assumed)."""
    chosen = engine.model.sampler
    if chosen != "auto":
        return chosen, f"the engine config sets model.sampler: {chosen}"
    row = release(version)
    if row is None:
        return "triton", "the plan names no vLLM release with FlashInfer"
    return row.sampler(version, engine)


def upstream_fix(version: str | None, kernel: str) -> str | None:
    """The upstream fix for the DeepGEMM M-values release `version` leaves cold on `kernel` (None: none)."""
    row = release(version)
    return dict(row.upstream_fixes).get(kernel) if row else None


def setup_lines() -> list[str]:
    """What tests/integration/vllm_parity/setup_vllm.sh installs, one release a line: `VERSION FLASHINFER`
    ('-': none beside it). The script reads the table through this, so it holds no release list."""
    return [f"{version} {VLLM_RELEASES[version].flashinfer or '-'}" for version in supported()]


def main(argv: list[str]) -> int:
    """`python -m planner.engine.releases setup`: the lines of setup_lines(), for the setup script."""
    if argv != ["setup"]:
        sys.stderr.write("usage: python -m planner.engine.releases setup\n")
        return 2
    sys.stdout.write("".join(line + "\n" for line in setup_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
