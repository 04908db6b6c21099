#!/usr/bin/env python3
"""The verdicts of bench/precompile_race.sh, from its reports (RES/<race>.<a|b|warm>.json).

    python3 bench/precompile_race.py RES_DIR [--json FILE]

Per race (dg, triton): what each racer compiled, waited for and loaded (its report's precompile
claims: executor/precompile/pool/summary.py), the node's distinct keys, and three checks: compiled
summed over the two racers equals the distinct keys (each key once on the node); both racers end
ok; the warm third run compiles nothing (every kernel from the cache the race left). And the
Triton bundle's verify run (RES/bundle-verify.json): 0 compiles from another cache directory.
"""

from __future__ import annotations

import argparse
import json
import os

RACES = ("dg", "triton")


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def racer(report: dict | None) -> dict:
    """One process's share: its status, its pool's claims, and what its stages compiled."""
    if report is None:
        return {"found": False}
    pre = report.get("precompile") or {}
    claims = pre.get("claims") or {}
    counts = report.get("counts") or {}  # steps by status
    return {"found": True, "status": report.get("status"), "pool": pre.get("status"),
            "compiled": claims.get("compiled"), "waited": claims.get("waited"), "loaded": claims.get("loaded"),
            "node_keys": claims.get("node_keys"), "taken_over": len(claims.get("taken_over") or []),
            "counts": counts}


def stage_compiles(report: dict | None) -> int | None:
    """Kernels the run compiled (its stages' count, pool and main process) plus the compiles its
    sealed JIT monitor saw (--expect-cached seals before the first step: each one is a miss)."""
    if report is None:
        return None
    stages = sum(s.get("compiled") or 0 for s in report.get("stages") or [])
    return stages + len((report.get("jit_monitor") or {}).get("post_seal_events") or [])


def verdicts(res: str, name: str) -> dict:
    a, b, warm = (load(os.path.join(res, f"{name}.{who}.json")) for who in ("a", "b", "warm"))
    ra, rb = racer(a), racer(b)
    keys = max(ra.get("node_keys") or 0, rb.get("node_keys") or 0) or None
    compiled = (ra.get("compiled") or 0) + (rb.get("compiled") or 0)
    warm_compiles = stage_compiles(warm)
    checks = {
        "each key once on the node": None if keys is None else compiled == keys,
        "both racers ok": ra.get("status") == "ok" and rb.get("status") == "ok",
        "warm run compiles nothing": None if warm_compiles is None else warm_compiles == 0}
    return {"race": name, "a": ra, "b": rb, "node_keys": keys, "compiled_by_racers": compiled,
            "warm": {"status": (warm or {}).get("status"), "compiled": warm_compiles,
                     "counts": (warm or {}).get("counts")}, "checks": checks}


def bundle_verdict(res: str) -> dict:
    """The Triton bundle built in one cache and verified from another: its verify run's compiles."""
    report = load(os.path.join(res, "bundle-verify.json"))
    compiles = stage_compiles(report)
    return {"status": (report or {}).get("status"), "compiled": compiles,
            "check": None if compiles is None else compiles == 0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("res")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = [verdicts(args.res, name) for name in RACES]
    for v in out:
        print(f"{v['race']}: A compiled {v['a'].get('compiled')}, B compiled {v['b'].get('compiled')} "
              f"(waited {v['a'].get('waited')}/{v['b'].get('waited')}), node keys {v['node_keys']}; "
              f"warm run compiled {v['warm']['compiled']}")
        for check, ok in v["checks"].items():
            print(f"  {({True: 'PASS', False: 'FAIL', None: 'n/a '})[ok]} {check}")
    bundle = bundle_verdict(args.res)
    print(f"triton bundle verified from another cache: {bundle['status']}, compiled {bundle['compiled']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"races": out, "bundle_verify": bundle}, f, indent=1)


if __name__ == "__main__":
    main()
