"""What a cache family is: the record each family's module fills in (executor/caches/<family>.py).

A family is one cache a start-up compiles or tunes into (DeepGEMM's kernels, Triton's, vLLM's
torch.compile cache, ...). Its record says, in one place:

- ``root``: where it lives on this machine, from an environment (executor/caches/roots.py's Env);
- ``collect``: what a bundle packs of it (member name -> file), and ``place``: how its members land
  in the installing machine's root;
- ``paths``: the files of it that may name the building machine's paths, and for each whether a
  loader follows them (then ``rewrite`` makes them this machine's) or not (kept as they are, and
  why); a file that names them and matches no rule is not installed (executor/caches/relocate.py);
- ``check``: what must hold of a placed file for its loader to take it without failing (a JSON file
  that parses, a complete ELF, a compile-cache entry whose artifact is there); what fails is removed,
  and the library compiles that piece itself (executor/caches/checks.py);
- ``identity``: what an entry is a compile of, whatever its key (the use report's "compiled again"),
  and ``rebuilt_in``: where the library builds an entry again outside the root, if it does;
- ``monitor``: how the JIT monitor watches it and counts its compiles (its watcher and counters:
  executor/jit_monitor.py builds itself from these), if it counts them.
"""

from __future__ import annotations

import os
import re
from typing import Callable, NamedTuple

from .roots import Env

PLAN, VLLM = "plan", "vllm"  # what a bundle was built from: a plan's warmup, or a vLLM start-up
HASHY = re.compile(r"^[0-9a-fA-F_-]{8,}$|^[0-9a-f]{8,}")  # a path component that is a key, not a name


class PathRule(NamedTuple):
    """Files of a family that may name the building machine's cache paths.

    `matches(rel, path)`: the file's path relative to the family's root, and where it is now.
    `rewrite(data, relocation, final)`: its content for this machine (`final`: where the file
    will be); None: a loader never follows the paths it names, and it is kept as it is."""

    matches: Callable[[str, str], bool]
    rewrite: Callable | None
    why: str


class Unresolved(NamedTuple):
    """A placed file or entry its loader would not take, and why: removed (`removes`), or already
    taken out of the file that held it (an entry of vLLM's compile cache)."""

    path: str
    why: str
    removes: bool = True


class Counter(NamedTuple):
    """One of the JIT monitor's counters (a key of its StepCounts and of the report's counts)."""

    name: str
    unset: int | None = 0     # its value before anything is counted (None: the watcher may be unable to tell)
    per_kernel: bool = False  # also counted per kernel name (StepCounts.kernels)


class Monitored(NamedTuple):
    """How the JIT monitor watches a family and counts its compiles (executor/jit_monitor.py builds
    its watchers and its counters from these rows, so a monitored family is its module and its row)."""

    kind: str                 # the key of the start-up phases' counts (vllm_bridge/warmup/phases.py)
    backend: str              # the backend its post-seal events name (executor/jit_monitor.py)
    label: str                # as a log line says it
    compiled: str             # the counter of compiles
    loaded: str | None = None  # the counter of loads from the disk cache, where the monitor sees them
    counters: tuple = ()      # every Counter its watcher keeps, `compiled` and `loaded` among them
    watcher: Callable | None = None  # (monitor) -> its Watcher (executor/caches/watcher.py)
    order: int = 99           # its place among the monitor's watchers and counters: the report's counts
                              # keep their key order from before the table (a new family comes last)


class Placing(NamedTuple):
    """One family's placement: its staged members, its root here, and the install's context."""

    staged: str               # the family's directory in the checked staging tree
    dest: str                 # its root on this machine
    manifest: object          # the bundle's Manifest
    names: dict               # DeepGEMM: entry -> its name here (executor/caches/deep_gemm.py names_here)
    include_dir: str | None   # DeepGEMM's include directory here
    move: bool = False        # the staged files are ours to rename (the plugin's install)


def member_path(root: str, member: str, names: dict) -> str | None:
    """Where a member (its path relative to the family's root) lands: at the same place here."""
    return os.path.join(root, member)


def file_member_path(root: str, member: str, names: dict) -> str:
    """A file family's one member lands at its root, the file."""
    return root


def hashy_identity(root: str, entry: str) -> str:
    """The entry's path with its key components blanked (a recompile under another key matches)."""
    return "/".join("*" if HASHY.search(p) else p for p in entry.split("/"))


def file_entry(root: str, path: str) -> str:
    """The entry a file belongs to: its directory relative to the root, or the file at the root."""
    relative = os.path.relpath(path, root)
    return os.path.dirname(relative) or relative


class Family(NamedTuple):
    name: str                        # the member prefix in a bundle and the key in reports
    label: str                       # as a user reads it
    root: Callable[[Env], str | None]
    collect: Callable                # (root, fingerprint) -> (member name -> file, DeepGEMM KernelRecords)
    place: Callable                  # (Placing) -> Placed
    paths: tuple = ()                # PathRules, first match wins
    check: Callable | None = None    # (root, placed file) -> [Unresolved]
    identity: Callable = hashy_identity
    rebuilt_in: Callable | None = None  # (fingerprint) -> where the library builds an entry again outside the root
    rebuilt: Callable | None = None     # (that directory, entries, since) -> the entries built again there
    monitor: Monitored | None = None
    env_var: str | None = None       # the variable that names the root to a subprocess that compiles into it
    early: bool = False              # placed before vLLM resolves the model (at the plugin's register)
    origins: tuple = (VLLM,)         # the bundles that hold it
    file_name: str | None = None     # the root is this one file, not a directory (the plan's FlashInfer autotune file)
    member_path: Callable = member_path  # (root, member, DeepGEMM's names here) -> where it lands (None: not known yet)
