"""Warmup bundles: what a plan's warmup or a vLLM start-up put in the caches, packed, verified and
installed on machines that never built it. The caches themselves are families of executor/caches/.

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
    sources.py        where a bundle comes from: a file, a directory holding one, or an `oci://` reference
    oci_ref.py        a bundle's place in an OCI registry: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`
    oci_auth.py       registry credentials and the answer to a registry's challenge, as docker and oras-go do it
    oci.py            a bundle file as one OCI artifact, pushed to and pulled from a registry through `oras`
    cli.py            `warmup bundle build|verify|install|inspect`
    cli_registry.py   `warmup bundle push|pull`: a bundle to and from an OCI registry
"""
