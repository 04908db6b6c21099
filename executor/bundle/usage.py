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

- **read from elsewhere** (issue 43 item 4): a file of the building machine's own copy of the bundle,
  read since the install. Where the building machine's cache roots exist here (the bundle is
  installed on the machine that built it, or on one with the same paths), the install marks the
  building copies of the members it placed as it marks its own; a read of one means a loader took
  that family's files from outside what was installed (a path the relocation did not move), which
  a machine that never built the bundle would not have.

An entry is the directory holding a file (a Triton or DeepGEMM cache entry, a FlashInfer module, a
leaf of torch.compile's tree), or the file itself at the family's root (vLLM's model info). What an
entry is a compile of, and where a family compiles one again outside its root, are the family's
(executor/caches/<family>.py: ``identity``, ``rebuilt``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field

from ..caches.family import file_entry as entry_of
from ..caches.registry import of
from ..caches.tree import files_under
from .records import record_path  # noqa: F401 - where callers find a record

UNREAD = 1.0  # the access time the install leaves: no read leaves it
OURS = re.compile(r"^(\.?warmup-|\.warmup)|\.lock$")  # the warmup's own files in a cache: the pool's manifest, costs, locks


@dataclass(frozen=True)
class Installed:
    """What one install placed, per family: the record the check after ready reads (kept as JSON
    beside the caches for `warmup bundle verify`)."""

    bundle: str
    at: dict                        # family -> when its placement ended (epoch seconds)
    roots: dict                     # family -> its root
    entries: dict                   # family -> [entry paths relative to the root]
    tracked: dict                   # family -> whether its filesystem records reads
    rebuild_dirs: dict = field(default_factory=dict)  # family -> where its library would build an entry again
    left_out: dict = field(default_factory=dict)      # family -> [members not at their place: not installable, removed]
    elsewhere: dict = field(default_factory=dict)     # family -> [the building copies marked, absolute paths]
    fingerprint: dict | None = None  # an as-built install's: the bundle's, the machine still to be checked

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
                         {**self.rebuild_dirs, **later.rebuild_dirs}, {**self.left_out, **later.left_out},
                         {**self.elsewhere, **later.elsewhere},
                         later.fingerprint if later.fingerprint is not None else self.fingerprint)


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
    elsewhere: tuple = field(default_factory=tuple)  # the building copies read since the install

    @property
    def inert(self) -> tuple:
        """The installed entries that did no work (an entry compiled again was never loaded either)."""
        return tuple(sorted(set(self.never_loaded) | set(self.compiled_again)))


# --- at install ------------------------------------------------------------------------------------

def mark(bundle: str, roots: dict, placed_paths: dict, manifest=None, left_out: dict | None = None,
         fingerprint: dict | None = None) -> Installed:
    """Leave UNREAD on every file placed (`placed_paths`: family -> the files or directories
    placed) and on the building machine's copies of the bundle's members where they are on this
    machine (`manifest`: their roots), and return the record. Nothing here reads a placed file."""
    entries, tracked, rebuild = {}, {}, {}
    for family, paths in placed_paths.items():
        root = roots[family]
        files = [f for p in paths for f in files_under(p)]
        for path in files:
            os.utime(path, (UNREAD, os.stat(path).st_mtime))
        entries[family] = sorted({entry_of(root, f) for f in files})
        tracked[family] = records_reads(root)
        where = of(family).rebuilt_in(manifest.fingerprint) if manifest is not None and of(family).rebuilt_in else None
        if where:
            rebuild[family] = where
    elsewhere = mark_building_copies(manifest, roots, set(placed_paths)) if manifest is not None else {}
    now = time.time()
    return Installed(bundle, {f: now for f in placed_paths}, {f: roots[f] for f in placed_paths}, entries, tracked,
                     rebuild, dict(left_out or {}), elsewhere, fingerprint)


def mark_building_copies(manifest, roots: dict, placed: set) -> dict:
    """family -> the building machine's copies of its members that exist here, each marked UNREAD
    (a root that is this machine's own root of the family is not elsewhere)."""
    out = {}
    for family, built in sorted((manifest.roots or {}).items()):
        here = roots.get(family)
        if family not in placed or not built or not here or os.path.normpath(built) == os.path.normpath(here) \
                or not os.path.isdir(built):
            continue
        where = of(family).member_path
        copies = [where(built, f.path.split("/", 1)[1], {}) for f in manifest.files if f.path.split("/")[0] == family]
        marked = [p for p in copies if p and _marked(p)]
        if marked:
            out[family] = sorted(marked)
    return out


def _marked(path: str) -> bool:
    try:
        os.utime(path, (UNREAD, os.stat(path).st_mtime))
        return True
    except OSError:  # not there, or not ours to mark: not watched
        return False


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
    """Per family, what of the install was loaded, what was compiled again, what is new, and
    which of the building copies were read instead."""
    out = []
    for family in sorted(installed.entries):
        root, entries = installed.roots[family], installed.entries[family]
        tracked = bool(installed.tracked.get(family))
        loaded = set(e for e in entries if _read(root, e)) if tracked else set()
        never = tuple(e for e in entries if e not in loaded) if tracked else ()
        new = _written_since(root, installed.at[family], set(entries))
        again, again_new = _compiled_again(family, root, never if tracked else tuple(entries), new, installed)
        elsewhere = tuple(p for p in installed.elsewhere.get(family, ()) if _atime(p) not in (UNREAD, 0.0))
        out.append(FamilyUse(family, len(entries), len(loaded), tracked, never, again,
                             tuple(e for e in new if e not in again_new), elsewhere))
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
    entries that are those compiles). A family whose library builds again outside its root says
    where (its ``rebuilt``)."""
    rebuilt = of(family).rebuilt
    if rebuilt is not None:
        return tuple(rebuilt(installed.rebuild_dirs.get(family), candidates, installed.at[family])), ()
    identity = of(family).identity
    written = {identity(root, e): e for e in new}
    placed = {identity(root, e): e for e in candidates}
    both = set(written) & set(placed)
    return tuple(sorted(placed[i] for i in both)), tuple(sorted(written[i] for i in both))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:  # gone: written at no time since
        return float("-inf")


# --- the record on disk (for `warmup bundle verify`) -----------------------------------------------

def save(installed: Installed, path: str) -> None:
    """Write the record, merged into the one an earlier placement of the same bundle left."""
    earlier = load(path)
    if earlier is not None and earlier.bundle == installed.bundle:
        installed = earlier.merged(installed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".warmup-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(installed.to_json())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk: no half-written record left beside it
            os.unlink(tmp)
        raise


def load(path: str) -> Installed | None:
    try:
        with open(path, encoding="utf-8") as f:
            return Installed.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None


# --- the report ------------------------------------------------------------------------------------

def lines(uses: list[FamilyUse]) -> list[str]:
    """One line per family, then one per inert entry ('never loaded' or 'compiled again') and one
    per family whose files were read from elsewhere."""
    out = []
    for use in uses:
        reads = f"{use.loaded} loaded" if use.tracked else "reads not recorded on this filesystem"
        out.append(f"{use.family}: {use.installed} installed, {reads}, {len(use.never_loaded)} never loaded, "
                   f"{len(use.compiled_again)} compiled again, {len(use.new)} new, "
                   f"{len(use.elsewhere)} read from elsewhere")
        out += [f"  never loaded: {use.family}/{e}" for e in use.never_loaded if e not in use.compiled_again]
        out += [f"  compiled again: {use.family}/{e}" for e in use.compiled_again]
        if use.elsewhere:
            out.append(f"  read from elsewhere: {use.family}: {len(use.elsewhere)} files of the building machine's "
                       f"copy, not the installed one, e.g. {use.elsewhere[0]}")
    return out


def inert_count(uses: list[FamilyUse]) -> int:
    """Installed entries that did no work, and building copies read in their place."""
    return sum(len(u.inert) + len(u.elsewhere) for u in uses)
