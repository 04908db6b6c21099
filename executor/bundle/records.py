"""Where the records of a machine's installs are kept, and which await the machine's check.

Each install of a vLLM start-up's bundle leaves a record of what it placed (executor/bundle/usage.py)
under vLLM's cache root, one per bundle; an install made against the bundle's own fingerprint
(``warmup bundle install --target bundle``) leaves a mark beside it until the vLLM plugin has
checked the real machine (executor/bundle/machine_check.py). Standard library only: the plugin asks
``pending`` in every vLLM process, at register.
"""

from __future__ import annotations

import os

RECORDS = "warmup-bundle-installs"
UNCHECKED = ".unchecked"


def records_dir(vllm_cache_root: str) -> str:
    return os.path.join(vllm_cache_root, RECORDS)


def record_path(vllm_cache_root: str, bundle_digest: str) -> str:
    """Where the record of a bundle's install under this vLLM cache root is kept (one per bundle)."""
    return os.path.join(records_dir(vllm_cache_root), f"{bundle_digest}.json")


def mark_pending(record: str) -> None:
    """Say that the install recorded at `record` was checked against the bundle, not the machine."""
    with open(record + UNCHECKED, "w", encoding="utf-8") as f:
        f.write("installed with --target bundle: the vLLM plugin checks the machine at start\n")


def pending(vllm_cache_root: str) -> list[str]:
    """The records under this vLLM cache root whose machine is still to be checked."""
    try:
        names = os.listdir(records_dir(vllm_cache_root))
    except OSError:
        return []
    return sorted(os.path.join(records_dir(vllm_cache_root), n[:-len(UNCHECKED)])
                  for n in names if n.endswith(UNCHECKED))
