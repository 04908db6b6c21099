"""Warmup bundles: what a plan's warmup or a vLLM start-up put in the caches, packed, verified and
installed on machines that never built it. The caches themselves are families of executor/caches/.

The face, which is all the rest of the project uses (tests/executor/test_bundle_face.py: nothing
outside this package imports one of its modules). Importing the package imports none of them: each
name is looked up in its module when first asked for (the plugin runs inside vLLM's API server,
whose start-up time counts).

    open_source, AlreadyFailed             a bundle's place (a file, a directory, `oci://`) opened by
                                           its scheme (sources/), and a failure another process said
    read_manifest, Cancelled, Origin       a bundle's manifest; a write stopped at exit; who started vLLM
    install_startup, install_startup_early, startup_in_place, list_startup, write_listed,
    startup_summary                        a vLLM start-up's bundle: installed, listed at ready, written
    prepare_in_background                  its members checked once per machine, off the critical path
    current_environment, check_output      this machine's fingerprint; a bundle output refused early
    pending_installs, check_installs_on_machine
                                           installs made against a bundle's own fingerprint, checked here
    load_usage, usage_record_path, check_usage, usage_lines, inert_count
                                           what of an install was used
    add_commands                           `warmup bundle ...` (the executor's CLI adds it)

The package:

    archive.py        the tar and its typed manifest; extraction that checks every file
    environment.py    the environment fingerprint (GPU, driver, CUDA/NVCC, torch, triton, DeepGEMM, FlashInfer)
    packing.py        what a bundle holds of a machine's caches
    placement.py      relocate, place and check a staged bundle in a machine's roots
    ops.py            a plan's bundle: build, install, verify
    startup.py        a vLLM start-up's bundle: build, install (and install_early, before vLLM resolves the model)
    staging.py        the members checked once per machine, off vLLM's critical path
    usage.py          what of an install was used, compiled again, or read from the building copy
    records.py        where the records of installs are kept
    machine_check.py  installs against a bundle's own fingerprint, checked on the machine at start
    reading.py        opening a bundle to read it, bounded: every read of an input ends
    locks.py          the bundle's one lock: an exclusive fcntl lock on a file, released when its holder ends
    sources/          where a bundle comes from: one module per scheme (a file, a directory holding one,
                      an `oci://` reference) in one table, opened alike by the CLI and the plugin
    oci_ref.py        a bundle's place in an OCI registry: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`
    oci_auth.py       registry credentials and the answer to a registry's challenge, as docker and oras-go do it
    oci.py            a bundle file as one OCI artifact, pushed to and pulled from a registry through `oras`
    cli.py            `warmup bundle build|verify|install|inspect`
    inspect_report.py what `warmup bundle inspect` prints of a bundle: building paths, families, keys held and planned
    cli_registry.py   `warmup bundle push|pull`: a bundle to and from an OCI registry
"""

from __future__ import annotations

import importlib

# name -> (module, its name there). Looked up on every access, never kept here: a test that patches
# the module's attribute is seen by the next caller.
FACE = {
    "open_source": ("sources", "open_source"),
    "AlreadyFailed": ("sources", "AlreadyFailed"),
    "read_manifest": ("archive", "read_manifest"),
    "Cancelled": ("archive", "Cancelled"),
    "Origin": ("startup", "Origin"),
    "install_startup": ("startup", "install"),
    "install_startup_early": ("startup", "install_early"),
    "startup_in_place": ("startup", "all_in_place"),
    "list_startup": ("startup", "listing"),
    "write_listed": ("startup", "write_listed"),
    "startup_summary": ("startup", "summary"),
    "prepare_in_background": ("staging", "prepare_in_background"),
    "current_environment": ("environment", "current"),
    "check_output": ("ops", "check_output"),
    "pending_installs": ("records", "pending"),
    "check_installs_on_machine": ("machine_check", "check"),
    "load_usage": ("usage", "load"),
    "usage_record_path": ("usage", "record_path"),
    "check_usage": ("usage", "check"),
    "usage_lines": ("usage", "lines"),
    "inert_count": ("usage", "inert_count"),
    "add_commands": ("cli", "add_commands"),
}
__all__ = sorted(FACE)


def __getattr__(name: str):
    """A face name, from its module (imported now, on first use); any other name is not ours, and
    `from executor.bundle import MODULE` then imports the module as Python does for a package."""
    try:
        module, attribute = FACE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(FACE))
