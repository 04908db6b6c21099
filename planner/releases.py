"""The vLLM releases this project supports: the one list, with the plan of each.

A supported release is an exact vLLM version whose warmup a built-in plan follows (its names
were read in that release's source; tests/vllm_parity checks the plans against it). Everything
that names supported releases reads this list: the vLLM plugin's table of the names it patches
(vllm_bridge/releases.py builds its rows from it, and the plugin refuses any other version),
`warmup engine --from-vllm` (vllm_bridge/cli.py, through that table), `warmup --version`, and
pyproject's `vllm` extra, which pins the newest release (tests/test_releases.py checks it).
The planner only names the releases; it never imports vLLM or the bridge.
"""

from __future__ import annotations

# exact vLLM version -> the built-in plan that models its warmup (oldest first)
SUPPORTED_VLLM = {
    "0.25.0": "vllm-0.25",
    "0.33.0": "vllm-0.33",
}


def version_key(version: str) -> tuple:
    """'0.33.0' -> (0, 33, 0), for ordering releases."""
    return tuple(int(part) for part in version.split("."))


def newest() -> str:
    """The newest supported release (what the `vllm` extra installs)."""
    return max(SUPPORTED_VLLM, key=version_key)


def version_text() -> str:
    """What `warmup --version` prints: the package, the plan format it writes, the vLLM releases."""
    from . import __version__
    from .expanded import FORMAT

    lines = [f"warmup-planner {__version__}",
             f"expanded plan format: {FORMAT} (schemas/expanded-plan.schema.json)",
             "supported vLLM releases (the plugin accepts exactly these versions):"]
    lines += [f"  vllm {version}  plan {plan}" for version, plan in sorted(SUPPORTED_VLLM.items(),
                                                                          key=lambda item: version_key(item[0]))]
    return "\n".join(lines) + "\n"
