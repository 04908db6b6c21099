"""Whether what a bundle installed was used (issue 35 item 3: an inert cache is never silent).

A cache can be installed and still be inert: at a path its reader does not look at, under a key
its reader no longer computes (NVIDIA ModelExpress #560: 30 MiB moved, torch.compile still took
13 s). Nothing in the caches says so, so the install leaves a mark on every file it placed and the
check after ready reads the marks:

- **loaded**: a reader opened a file of the entry. The install sets each placed file's access time
  to ``UNREAD`` (1970-01-01T00:00:01); the kernel's relatime rule updates an access time older than
  the file's change time on the next read, and setting it changed the change time to now. So a file
  read since has an access time past ``UNREAD`` whatever the reader (Triton, DeepGEMM's cuModuleLoad,
  dlopen of a FlashInfer module, torch's loads), and the check holds no hook in any of them. A
  filesystem mounted ``noatime`` records no read: the install probes each root and the report says
  "reads not recorded" there rather than calling its entries inert.
- **compiled again**: an entry of the same kernel written after the install beside the one placed
  (a Triton kernel of the same name, a DeepGEMM kernel of the same name, a FlashInfer module built in
  the JIT workspace, a torch.compile directory under another hash): the placed one was not found.
- **new**: written after the install with no installed twin: the bundle did not have it.

An entry is the directory holding a file (a Triton or DeepGEMM cache entry, a FlashInfer module, a
leaf of torch.compile's tree), or the file itself at the family's root (vLLM's model info).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field

UNREAD = 1.0  # the access time the install leaves: no read leaves it
OURS = re.compile(r"^(\.?warmup-|\.warmup)|\.lock$")  # the warmup's own files in a cache: the pool's manifest, costs, locks
HASHY = re.compile(r"^[0-9a-fA-F_-]{8,}$|^[0-9a-f]{8,}")  # a component that is a key, not a name


@dataclass(frozen=True)
class Installed:
    """What one install placed, per family: the record the check after ready reads (kept as JSON
    beside the caches for `warmup bundle verify`)."""

    bundle: str
    at: dict                        # family -> when its placement ended (epoch seconds)
    roots: dict                     # family -> its root
    entries: dict                   # family -> [entry paths relative to the root]
    tracked: dict                   # family -> whether its filesystem records reads
    flashinfer_jit_dir: str | None = None  # where FlashInfer would have built a module again

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Installed":
        return cls(**json.loads(text))

    def merged(self, later: "Installed") -> "Installed":
        """This record and a later install's of the same bundle (the plugin places vLLM's model
        info at register and the rest at load_model)."""
        return Installed(self.bundle, {**self.at, **later.at}, {**self.roots, **later.roots},
                         {**self.entries, **later.entries}, {**self.tracked, **later.tracked},
                         later.flashinfer_jit_dir or self.flashinfer_jit_dir)


@dataclass(frozen=True)
class FamilyUse:
    """One family's use after ready: counts, and the entries by name."""

    family: str
    installed: int
    loaded: int
    tracked: bool
    never_loaded: tuple = field(default_factory=tuple)
    compiled_again: tuple = field(default_factory=tuple)
    new: tuple = field(default_factory=tuple)

    @property
    def inert(self) -> tuple:
        """The installed entries that did no work (an entry compiled again was never loaded either)."""
        return tuple(sorted(set(self.never_loaded) | set(self.compiled_again)))


# --- at install ------------------------------------------------------------------------------------

def mark(bundle: str, roots: dict, placed_paths: dict, flashinfer_jit_dir: str | None = None) -> Installed:
    """Leave UNREAD on every file placed (`placed_paths`: family -> the files or directories
    placed) and return the record. Nothing here reads a placed file."""
    entries, tracked = {}, {}
    for family, paths in placed_paths.items():
        root = roots[family]
        files = [f for p in paths for f in _files(p)]
        for path in files:
            os.utime(path, (UNREAD, os.stat(path).st_mtime))
        entries[family] = sorted({entry_of(root, f) for f in files})
        tracked[family] = records_reads(root)
    now = time.time()
    return Installed(bundle, {f: now for f in placed_paths}, {f: roots[f] for f in placed_paths}, entries, tracked,
                     flashinfer_jit_dir)


def _files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return [os.path.join(folder, n) for folder, _, names in os.walk(path) for n in names]


def entry_of(root: str, path: str) -> str:
    """The entry a file belongs to: its directory relative to the root, or the file at the root."""
    relative = os.path.relpath(path, root)
    folder = os.path.dirname(relative)
    return folder or relative


def records_reads(root: str) -> bool:
    """Whether the filesystem of `root` updates access times on a read (relatime, strictatime)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".warmup-atime-", dir=root)
    except OSError:
        return False
    try:
        os.write(fd, b"x")
        os.close(fd)
        os.utime(probe, (UNREAD, time.time()))
        with open(probe, "rb") as f:
            f.read()
        return os.stat(probe).st_atime != UNREAD
    finally:
        os.unlink(probe)


# --- after ready -----------------------------------------------------------------------------------

def check(installed: Installed) -> list[FamilyUse]:
    """Per family, what of the install was loaded, what was compiled again and what is new."""
    out = []
    for family in sorted(installed.entries):
        root, entries = installed.roots[family], installed.entries[family]
        tracked = bool(installed.tracked.get(family))
        loaded = set(e for e in entries if _read(root, e)) if tracked else set()
        never = tuple(e for e in entries if e not in loaded) if tracked else ()
        new = _written_since(root, installed.at[family], set(entries))
        again, again_new = _compiled_again(family, root, never if tracked else tuple(entries), new, installed)
        out.append(FamilyUse(family, len(entries), len(loaded), tracked, never, again,
                             tuple(e for e in new if e not in again_new)))
    return out


def _entry_files(root: str, entry: str) -> list[str]:
    path = os.path.join(root, entry)
    if os.path.isfile(path):
        return [path]
    try:
        return [os.path.join(path, n) for n in os.listdir(path) if os.path.isfile(os.path.join(path, n))]
    except OSError:
        return []


def _read(root: str, entry: str) -> bool:
    return any(_atime(f) != UNREAD for f in _entry_files(root, entry))


def _atime(path: str) -> float:
    try:
        return os.stat(path).st_atime
    except OSError:  # removed since: its reader had it
        return 0.0


def _written_since(root: str, since: float, installed: set) -> tuple:
    """Entries holding a file written at or after `since` that the install did not place."""
    found = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not OURS.search(d)]
        for name in names:
            path = os.path.join(folder, name)
            if OURS.search(name) or not os.path.isfile(path):
                continue
            entry = entry_of(root, path)
            if entry not in installed and _mtime(path) >= since:
                found.add(entry)
    return tuple(sorted(found))


def _compiled_again(family: str, root: str, candidates: tuple, new: tuple, installed: Installed) -> tuple:
    """(the installed entries among `candidates` whose kernel was written again since, the new
    entries that are those compiles)."""
    if family == "flashinfer_jit":  # built again in the JIT workspace, not under this root
        return tuple(rebuilt(installed.flashinfer_jit_dir, candidates, installed.at[family])), ()
    written = {identity(family, root, e): e for e in new}
    placed = {identity(family, root, e): e for e in candidates}
    both = set(written) & set(placed)
    return tuple(sorted(placed[i] for i in both)), tuple(sorted(written[i] for i in both))


def rebuilt(jit: str | None, names, since: float) -> list[str]:
    """Of the FlashInfer modules a bundle placed, those FlashInfer built again in its JIT workspace
    (`jit`, executor/bundle/flashinfer_modules.py) after `since`: the placed library was not where
    FlashInfer looked."""
    if not jit:
        return []
    return sorted(n for n in names if _mtime(os.path.join(jit, n, f"{n}.so")) >= since)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:  # gone: written at no time since
        return float("-inf")


def identity(family: str, root: str, entry: str) -> str:
    """What an entry is a compile of, whatever its key: a Triton entry's kernel names, a DeepGEMM
    kernel's name, else the entry's path with its key components blanked."""
    if family == "triton":
        names = sorted(n[:-5] for n in os.listdir(os.path.join(root, entry))
                       if n.endswith(".json") and not n.startswith("__grp__")) if os.path.isdir(os.path.join(root, entry)) else []
        return "triton:" + ",".join(names)
    parts = entry.split("/")
    if family == "deep_gemm":  # cache/kernel.<name>.<key> (2.5/2.6) or cache/<name>.<key> (2.8)
        return "deep_gemm:" + parts[-1].rsplit(".", 1)[0]
    return "/".join("*" if HASHY.search(p) else p for p in parts)


# --- the record on disk (for `warmup bundle verify`) -----------------------------------------------

def record_path(vllm_cache_root: str, bundle_digest: str) -> str:
    """Where the record of a bundle's install under this vLLM cache root is kept (one per bundle)."""
    return os.path.join(vllm_cache_root, "warmup-bundle-installs", f"{bundle_digest}.json")


def save(installed: Installed, path: str) -> None:
    """Write the record, merged into the one an earlier placement of the same bundle left."""
    earlier = load(path)
    if earlier is not None and earlier.bundle == installed.bundle:
        installed = earlier.merged(installed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".warmup-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(installed.to_json())
    os.replace(tmp, path)


def load(path: str) -> Installed | None:
    try:
        with open(path, encoding="utf-8") as f:
            return Installed.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None


# --- the report ------------------------------------------------------------------------------------

def lines(uses: list[FamilyUse]) -> list[str]:
    """One line per family, then one per inert entry ('never loaded' or 'compiled again')."""
    out = []
    for use in uses:
        reads = f"{use.loaded} loaded" if use.tracked else "reads not recorded on this filesystem"
        out.append(f"{use.family}: {use.installed} installed, {reads}, {len(use.never_loaded)} never loaded, "
                   f"{len(use.compiled_again)} compiled again, {len(use.new)} new")
        out += [f"  never loaded: {use.family}/{e}" for e in use.never_loaded if e not in use.compiled_again]
        out += [f"  compiled again: {use.family}/{e}" for e in use.compiled_again]
    return out


def inert_count(uses: list[FamilyUse]) -> int:
    return sum(len(u.inert) for u in uses)
