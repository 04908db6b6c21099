"""The bundle proof's helpers (issue 43 item 5), for bench/vllm_startup_proof.sh and the device calls.

    python3 bench/bundle_proof.py foreign-roots BUNDLE     # the bundle's building roots that are not this
                                                          # run's own (its environment: VLLM_CACHE_ROOT, ...)
    python3 bench/bundle_proof.py split BUNDLE OUTDIR [--first N] [--budget MIB] [--files K]
    python3 bench/bundle_proof.py join PARTS_DIR BUNDLE    # the parts of another machine's bundle, checked
    python3 bench/bundle_proof.py opens LOG                # attempts the tripwire recorded (0: none)

A bundle travels from the machine that built it to one that never did through the device tool's
output (files of at most 16 MiB, 8 a call, 64 MiB together) and a later call's carried folder:
``split`` writes ``<name>.partNN`` files of 15 MiB (from part N on, as many as the budget and the
file count allow, saying which part comes next) and ``<name>.sha256``; ``join`` puts them back
together and refuses a set with a part missing or a sha256 that differs.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys

PART = 15 << 20


def foreign_roots(bundle: str) -> list[str]:
    """The bundle's building roots, less those that are this environment's own root of that family."""
    from executor.bundle import read_manifest
    from executor.caches.registry import CacheRoots

    built = read_manifest(bundle).roots or {}
    here = CacheRoots.resolve(os.environ, families=list(built))
    return sorted({os.path.normpath(r) for f, r in built.items() if os.path.normpath(r) != os.path.normpath(here[f] or "")})


def split(bundle: str, out: str, first: int, budget_mib: float, files: int) -> None:
    size = os.path.getsize(bundle)
    count = -(-size // PART)
    name = os.path.basename(bundle)
    if first == 0:
        with open(os.path.join(out, f"{name}.sha256"), "w") as f:
            f.write(f"{sha256(bundle)} {count}\n")
        files -= 1
    written = 0
    with open(bundle, "rb") as src:
        src.seek(first * PART)
        index = first
        while index < count and files > 0 and written + PART <= budget_mib * (1 << 20):
            data = src.read(PART)
            with open(os.path.join(out, f"{name}.part{index:02d}"), "wb") as f:
                f.write(data)
            written += len(data)
            index += 1
            files -= 1
    left = f"next: --first {index}" if index < count else "all parts written"
    print(f"{name}: {size / 2**20:.1f} MiB in {count} parts; wrote {first}..{index - 1}; {left}")


def join(parts_dir: str, bundle: str) -> None:
    [stamp] = glob.glob(os.path.join(parts_dir, "*.sha256")) or [None]
    if stamp is None:
        sys.exit(f"bundle_proof: no <name>.sha256 in {parts_dir}")
    digest, count = open(stamp).read().split()
    name = os.path.basename(stamp)[: -len(".sha256")]
    parts = [os.path.join(parts_dir, f"{name}.part{i:02d}") for i in range(int(count))]
    missing = [p for p in parts if not os.path.isfile(p)]
    if missing:
        sys.exit(f"bundle_proof: {len(missing)} of {count} parts missing, e.g. {missing[0]}")
    os.makedirs(os.path.dirname(os.path.abspath(bundle)), exist_ok=True)
    with open(bundle + ".tmp", "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                out.write(f.read())
    if sha256(bundle + ".tmp") != digest:
        os.unlink(bundle + ".tmp")
        sys.exit(f"bundle_proof: the joined parts do not match {stamp}")
    os.replace(bundle + ".tmp", bundle)
    print(f"{bundle}: {os.path.getsize(bundle) / 2**20:.1f} MiB from {count} parts, sha256 {digest[:16]}")


def sha256(path: str) -> str:  # executor/bundle/archive.py has one: split and join run with Python alone
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def opens(log: str) -> int:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("foreign-roots").add_argument("bundle")
    s = sub.add_parser("split")
    s.add_argument("bundle")
    s.add_argument("out")
    s.add_argument("--first", type=int, default=0)
    s.add_argument("--budget", type=float, default=60.0, help="MiB this call may write")
    s.add_argument("--files", type=int, default=4, help="files this call may write")
    j = sub.add_parser("join")
    j.add_argument("parts_dir")
    j.add_argument("bundle")
    sub.add_parser("opens").add_argument("log")
    args = p.parse_args()
    if args.cmd == "foreign-roots":
        print("\n".join(foreign_roots(args.bundle)))
    elif args.cmd == "split":
        split(args.bundle, args.out, args.first, args.budget, args.files)
    elif args.cmd == "join":
        join(args.parts_dir, args.bundle)
    else:
        print(opens(args.log))


if __name__ == "__main__":
    main()
