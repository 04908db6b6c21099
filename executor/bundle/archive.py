"""The bundle file: a tar holding ``warmup-bundle.json`` (the manifest) and the cache files.

Members: ``deep_gemm/<entry>/...`` (DeepGEMM kernels, either layout), ``triton/<...>`` (the
Triton cache the warmup filled, its precompile manifest included), ``flashinfer/<file>``
(FlashInfer's autotune cache). The manifest lists every member with its sha256 and size; a
reader checks them all before anything is written, so a truncated, corrupted or foreign file
is one line and nothing else.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from typing import NamedTuple

from planner.errors import PlanError

FORMAT = "warmup-bundle/v1"
MANIFEST = "warmup-bundle.json"
KINDS = ("deep_gemm", "triton", "flashinfer")


class FileRecord(NamedTuple):
    path: str        # member name: <kind>/<relative path>
    sha256: str
    size: int


class KernelRecord(NamedTuple):
    """One DeepGEMM cache entry: its directory, kernel, the plan key it is (None: a helper kernel
    such as transpose_fp32), and for 2.5/2.6 the context that re-keys it (dg_rekey)."""

    entry: str
    name: str
    layout: str
    key: str | None
    context: list | None = None


class Manifest(NamedTuple):
    format: str
    plan: str
    engine: str
    plan_digest: str
    fingerprint: dict
    files: list          # [FileRecord]
    deep_gemm: list      # [KernelRecord]
    keys: dict           # backend -> the plan's compile keys the warmup cached (precompile manifest)

    def to_json(self) -> str:
        doc = self._asdict()
        doc["files"] = [f._asdict() for f in self.files]
        doc["deep_gemm"] = [k._asdict() for k in self.deep_gemm]
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

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


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_bundle(out: str, manifest: Manifest, sources: dict) -> None:
    """Write the tar atomically: `sources` maps each member name to its file on disk."""
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            data = manifest.to_json().encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for record in manifest.files:
                tar.add(sources[record.path], arcname=record.path, recursive=False)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_manifest(path: str) -> Manifest:
    """The bundle's manifest; one line when the file is no bundle (missing, truncated, foreign)."""
    try:
        with tarfile.open(path, "r:*") as tar:
            member = tar.next()
            if member is None or member.name != MANIFEST or not member.isfile():
                raise PlanError(f"not a warmup bundle: its first member is not {MANIFEST}", file=path)
            text = tar.extractfile(member).read().decode("utf-8", errors="replace")
    except (OSError, tarfile.TarError, EOFError) as e:
        why = "not a tar archive" if isinstance(e, tarfile.ReadError) else f"{type(e).__name__}: {e}"
        raise PlanError(f"not a readable warmup bundle ({why})", file=path) from None
    return Manifest.from_json(text, path)


def extract_verified(path: str, manifest: Manifest, dest: str) -> None:
    """Extract every listed member into `dest`, checking sha256 and size; anything else refused."""
    expected = {f.path: f for f in manifest.files}
    seen = set()
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.name == MANIFEST:
                    continue
                _extract_member(tar, member, expected, dest, path)
                seen.add(member.name)
    except (OSError, tarfile.TarError, EOFError) as e:
        raise PlanError(f"truncated or corrupted warmup bundle ({type(e).__name__}: {e})", file=path) from None
    missing = sorted(set(expected) - seen)
    if missing:
        raise PlanError(f"truncated warmup bundle: {len(missing)} listed files missing, e.g. {missing[0]}", file=path)


def _extract_member(tar, member, expected: dict, dest: str, path: str) -> None:
    record = expected.get(member.name)
    if record is None or not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
        raise PlanError(f"corrupted warmup bundle: unexpected member {member.name!r}", file=path)
    target = os.path.join(dest, member.name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    h = hashlib.sha256()
    size = 0
    with tar.extractfile(member) as src, open(target, "wb") as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            h.update(block)
            size += len(block)
            out.write(block)
    if h.hexdigest() != record.sha256 or size != record.size:
        raise PlanError(f"corrupted warmup bundle: {member.name} does not match its sha256", file=path)
