"""The bundle file: a tar holding ``warmup-bundle.json`` (the manifest) and the cache files.

Members are ``<family>/<path under its root>``, one family per cache (executor/caches/registry.py:
DeepGEMM's kernels, Triton's cache, a plan's FlashInfer autotune file; a vLLM start-up's bundle,
``origin`` "vllm", adds vLLM's torch.compile cache, Inductor's, vLLM's FlashInfer autotune cache,
FlashInfer's JIT modules, its TensorRT-LLM DeepGEMM kernels and vLLM's model info). The manifest
lists every member with its sha256 and size, and the directory each family was packed from
(``roots``: what a relocation moves from, executor/caches/relocate.py).
``verify_members`` is the one check of the members, for install (which extracts them) and
inspect (which only reads): a member that is not a listed regular file (a link, a device, a
directory), has an absolute path or '..', or does not match its size and sha256 is refused in
one line naming it and the reason, so a truncated, corrupted, foreign or hostile file is one
line and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
from typing import NamedTuple

from planner.errors import PlanError, WriteError  # noqa: F401 - WriteError: what write_bundle raises (open_output)
from planner.output import open_output

from ..caches.deep_gemm import KernelRecord
from ..caches.family import PLAN, VLLM
from ..caches import registry
from ..caches.targets import cannot_write
from . import reading

FORMAT = "warmup-bundle/v1"
MANIFEST = "warmup-bundle.json"
__all__ = ["FORMAT", "MANIFEST", "PLAN", "VLLM", "FileRecord", "KernelRecord", "Manifest"]


class FileRecord(NamedTuple):
    path: str        # member name: <kind>/<relative path>
    sha256: str
    size: int


class Manifest(NamedTuple):
    format: str
    plan: str
    engine: str
    plan_digest: str
    fingerprint: dict
    files: list          # [FileRecord]
    deep_gemm: list      # [KernelRecord]
    keys: dict           # backend -> the plan's compile keys the warmup cached (precompile manifest)
    origin: str = PLAN   # PLAN: `warmup bundle build`; VLLM: a vLLM start-up through the plugin
    roots: dict | None = None  # family -> the cache directory it was packed from (relocation moves from it)

    def to_json(self) -> str:
        doc = self._asdict()
        doc["files"] = [f._asdict() for f in self.files]
        doc["deep_gemm"] = [k._asdict() for k in self.deep_gemm]
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    def digest(self) -> str:
        """What names this bundle's content (its manifest lists every member's sha256)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str, file: str) -> "Manifest":
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}")
            doc["files"] = [FileRecord(**f) for f in doc["files"]]
            doc["deep_gemm"] = [KernelRecord(**k) for k in doc["deep_gemm"]]
            return cls(**doc)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise PlanError(f"not a warmup bundle ({FORMAT}): its manifest is unreadable ({e})", file=file) from None


class Cancelled(Exception):
    """The bundle's writing was stopped (its process exits): nothing was written."""


def sha256_file(path: str, stat: bool = False):
    """The file's sha256; with `stat`, (sha256, its os.stat_result), PlanError where the file
    changed while it was read (what was hashed is not the file that is there)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        after = os.fstat(f.fileno())
    if not stat:
        return h.hexdigest()
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise PlanError("was written while it was read for the bundle; a bundle packs each file whole", file=path)
    return h.hexdigest(), after


def write_bundle(out: str, manifest: Manifest, sources: dict, first: tuple = (), cancelled=None) -> None:
    """Write the tar through the one writer of every output (planner.output.open_output): a
    symlink is written through, a device or a FIFO that exists (`-o /dev/null`) is written and
    never replaced, a regular file appears complete or not at all (also when the process dies
    while writing) with the mode `>` gives it, a missing directory is refused; a failed write is
    WriteError (exit 2) naming the file. `sources` maps each member to its file on disk; the
    families `first` come first in the tar, where a reader that wants only them stops early
    (verify_members' `only`). Each member is written as the manifest lists it: a file whose size
    or sha256 is no longer the manifest's (written since it was hashed) is PlanError, one line,
    and nothing is written; `cancelled()` true stops the writing between blocks (Cancelled;
    nothing is written)."""
    with open_output(out, binary=True) as f:
        _write_tar(f, manifest, sources, first, cancelled)


def _write_tar(f, manifest: Manifest, sources: dict, first: tuple, cancelled=None) -> None:
    with tarfile.open(fileobj=f, mode="w|gz", copybufsize=1 << 20) as tar:  # big blocks: few GIL handovers
        data = manifest.to_json().encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for record in sorted(manifest.files, key=lambda r: family_of(r) not in first):  # stable
            _add_as_listed(tar, record, sources[record.path], cancelled)


class _Hashing(io.RawIOBase):
    """A file read for the tar: what is read is hashed; `cancelled()` is asked at every block."""

    def __init__(self, f, cancelled):
        self._f, self._cancelled, self.sha = f, cancelled, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._cancelled is not None and self._cancelled():
            raise Cancelled()
        block = self._f.read(size)
        self.sha.update(block)
        return block


def _add_as_listed(tar, record: FileRecord, path: str, cancelled) -> None:
    """The member `record` from the file `path`, the header as ``tar.add`` makes it (the file's own
    stat), the content checked against the manifest's size and sha256 as it is written."""
    with open(path, "rb") as f:
        info = tar.gettarinfo(arcname=record.path, fileobj=f)
        if not info.isfile() or info.size != record.size:
            raise PlanError(f"changed size ({record.size} -> {info.size} bytes) after it was hashed; "
                            "a bundle packs each file whole", file=path)
        reader = _Hashing(f, cancelled)
        try:
            tar.addfile(info, reader)
        except OSError:
            if os.fstat(f.fileno()).st_size < record.size:  # tarfile's "unexpected end of data"
                raise PlanError("shrank after it was hashed; a bundle packs each file whole", file=path) from None
            raise
    if reader.sha.hexdigest() != record.sha256:
        raise PlanError("was written after it was hashed; a bundle packs each file whole", file=path)


MANIFEST_TOO_LARGE = f"its manifest, the first member, is over the {reading.MAX_MANIFEST_BYTES >> 20} MiB limit"
MEMBERS_TOO_LARGE = "it holds more than the members its manifest lists (a header or member larger than listed)"


def read_manifest(path: str) -> Manifest:
    """The bundle's manifest; one line when the file is no bundle (missing, truncated, foreign)."""
    try:
        with reading.open_tar(path, reading.manifest_limit(), MANIFEST_TOO_LARGE) as tar:
            member = tar.next()
            if member is None or member.name != MANIFEST or not member.isfile():
                raise PlanError(f"not a warmup bundle: its first member is not {MANIFEST}", file=path)
            text = tar.extractfile(member).read().decode("utf-8", errors="replace")
    except (OSError, tarfile.TarError, EOFError) as e:
        why = "not a tar archive" if isinstance(e, tarfile.ReadError) else f"{type(e).__name__}: {e}"
        raise PlanError(f"not a readable warmup bundle ({why})", file=path) from None
    manifest = Manifest.from_json(text, path)
    problem = manifest_problem(manifest)
    if problem:
        raise PlanError(f"refused: its manifest {problem}", file=path)
    return manifest


def manifest_problem(manifest: Manifest) -> str | None:
    """Names the install would build paths from: files under a family, DeepGEMM entries and
    kernels that are one plain directory name each."""
    for record in manifest.files:
        problem = name_problem(record.path)
        if problem or record.path.split("/")[0] not in registry.names():
            return (f"lists the file {record.path!r}, which "
                    f"{problem or 'is under no family ' + '/'.join(registry.names())}")
    for kernel in manifest.deep_gemm:
        for value in (kernel.entry, kernel.name):
            if not value or "/" in value or value in (".", ".."):
                return f"lists the DeepGEMM entry {kernel.entry!r} (kernel {kernel.name!r}), not a plain directory name"
    return None


def family_of(record) -> str:
    return record.path.split("/")[0]


def space_problem(manifest: Manifest, staging_parent: str, destinations: dict) -> str | None:
    """Why the bundle does not fit, before anything is written (None: it fits). Every member is
    first checked into a staging directory under `staging_parent`, then each family's files are
    copied next to their destination and renamed into place (`destinations`: family -> directory):
    each filesystem must hold what lands on it. The manifest's sizes are the ones install enforces
    (verify_members), so what it says is what can be written."""
    need: dict = {}  # st_dev -> [bytes, the directory named in the line]

    def add(directory: str, size: int) -> None:
        probe = _existing(directory)
        entry = need.setdefault(os.stat(probe).st_dev, [0, directory, probe])
        entry[0] += size

    add(staging_parent, sum(f.size for f in manifest.files))
    for family, directory in destinations.items():
        size = sum(f.size for f in manifest.files if family_of(f) == family)
        if directory and size:
            add(directory, size)
    for size, directory, probe in need.values():
        free = shutil.disk_usage(probe).free
        if size > free:
            return (f"needs {_mib(size)} on the filesystem of {directory}, which has {_mib(free)} free; "
                    "nothing was written")
    return None


def _existing(path: str) -> str:
    """`path`, or its nearest ancestor that exists (a destination install would create)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _mib(size: int) -> str:
    return f"{size / 1048576:.1f} MiB"


def verify_members(path: str, manifest: Manifest, dest: str | None = None, only: tuple | None = None) -> None:
    """Check every member the way install needs it, and write each into `dest` when given
    (install extracts, inspect only checks): a regular file the manifest lists, under a relative
    path without '..', once, with its size and sha256. Anything else is refused in one line
    (PlanError) naming the member and the reason. `only`: the members of these families alone,
    reading no further than the last of them (write_bundle's `first` puts them at the start)."""
    expected = {f.path: f for f in manifest.files if only is None or family_of(f) in only}
    others = {f.path for f in manifest.files} - set(expected)
    seen: set = set()
    pending = set(expected)
    limit = reading.members_limit(f.size for f in manifest.files)
    try:
        with reading.open_tar(path, limit, MEMBERS_TOO_LARGE) as tar:
            for member in tar:
                if only is not None and not pending:
                    break
                if member.name in others:
                    continue  # another family's member: checked by the install that wants it
                if member.name != MANIFEST or seen:  # the manifest is the first member, once
                    _check_member(tar, member, expected, seen, dest, path)
                seen.add(member.name)
                pending.discard(member.name)
    except PlanError:
        raise  # a staging directory that cannot be written is that, not a corrupted bundle
    except (OSError, tarfile.TarError, EOFError) as e:
        raise PlanError(f"truncated or corrupted warmup bundle ({type(e).__name__}: {e})", file=path) from None
    missing = sorted(set(expected) - seen)
    if missing:
        raise PlanError(f"truncated warmup bundle: {len(missing)} listed files missing, e.g. {missing[0]}", file=path)


def member_problem(member: tarfile.TarInfo, expected: dict, seen: set) -> str | None:
    """Why install refuses this member (None: it is one of the listed files, not seen yet)."""
    problem = name_problem(member.name) or _type_problem(member)
    if problem:
        return problem
    if member.name not in expected:
        return "is not listed in the manifest"
    if member.name in seen:
        return "appears twice"
    if member.size != expected[member.name].size:
        return f"has {member.size} bytes where the manifest says {expected[member.name].size}"
    return None


def name_problem(name: str) -> str | None:
    """A path that would land outside the directory it is extracted into."""
    if name.startswith("/"):
        return "has an absolute path"
    if ".." in name.split("/"):
        return "has '..' in its path"
    return None


def _type_problem(member: tarfile.TarInfo) -> str | None:
    if member.isfile():
        return None
    if member.issym() or member.islnk():
        kind = "symbolic" if member.issym() else "hard"
        base = os.path.dirname(member.name) if member.issym() else ""
        target = os.path.normpath(os.path.join(base, member.linkname))
        where = " out of the tree" if target.startswith(("/", "..")) else ""
        return f"is a {kind} link{where} (to {member.linkname!r}); a bundle holds regular files only"
    if member.ischr() or member.isblk():
        return "is a device; a bundle holds regular files only"
    what = "a directory" if member.isdir() else "a FIFO" if member.isfifo() else f"of tar type {member.type!r}"
    return f"is {what}; a bundle holds regular files only"


class _Discard:
    def write(self, block: bytes) -> None:
        pass


class _Staging:
    """A member's file in the staging directory. Only its own writes are converted: a staging
    directory that cannot take it (a full disk) is a WriteError naming it, not a corrupted bundle,
    while an error reading the bundle stays the bundle's."""

    def __init__(self, target: str):
        self.target = target
        self._f = self._do(lambda: _opened(target))

    def write(self, block: bytes) -> None:
        self._do(lambda: self._f.write(block))

    def close(self, flush: bool = True) -> None:
        try:
            if flush:
                self._do(self._f.flush)
        finally:
            with contextlib.suppress(OSError):  # flushed above, or given up: the error said is the first
                self._f.close()

    def _do(self, call):
        try:
            return call()
        except OSError as e:
            raise cannot_write(e, self.target) from None


def _opened(target: str):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return open(target, "wb")


@contextlib.contextmanager
def _staged(target: str | None):
    """Where a member's bytes go: its file in the staging directory (`target`), or nowhere (inspect)."""
    if target is None:
        yield _Discard()
        return
    out = _Staging(target)
    try:
        yield out
    except BaseException:
        out.close(flush=False)
        raise
    out.close()


def _check_member(tar, member, expected: dict, seen: set, dest: str | None, path: str) -> None:
    problem = member_problem(member, expected, seen)
    if problem:
        raise PlanError(f"refused: member {member.name!r} {problem}", file=path)
    target = os.path.join(dest, member.name) if dest is not None else None
    h = hashlib.sha256()
    allowed, written = expected[member.name].size, 0
    with tar.extractfile(member) as src, _staged(target) as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            written += len(block)
            if written > allowed:  # what the manifest lists is all a member may write (a sparse member, say)
                raise PlanError(f"refused: member {member.name!r} holds more than the {allowed} bytes the "
                                "manifest lists", file=path)
            h.update(block)
            out.write(block)
    if h.hexdigest() != expected[member.name].sha256:
        raise PlanError(f"refused: member {member.name!r} does not match its sha256 (corrupted)", file=path)
