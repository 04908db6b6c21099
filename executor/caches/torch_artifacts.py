"""torch's compile artifacts, read and rewritten without torch: the paths a loader follows inside them.

Inductor pickles objects that hold absolute paths and open them when loaded: each Triton kernel's
autotuner keeps its ``AutotuneCache`` with the local cache key, ``<Inductor cache>/<2 chars>/<hash>
.best_config`` of the building machine (torch/_inductor/runtime/autotune_cache.py), which it reads
for the best config and writes after benchmarking. Seen on the H100 (bench/RESULTS.md part AA): a
bundle-cold run opened the building machine's ``.best_config`` files 20 times, and the installed
copies were never loaded. The same objects are in three containers:

- an FX graph or AOTAutograd cache entry (``fxgraph/..``, ``aotautograd/..``): one pickle;
- a standalone-compile artifact (vLLM's ``artifact_compile_range_*``; torch/_inductor/standalone_compile.py):
  a CRC32 of the rest, then length-prefixed fields (8-byte big-endian sizes,
  torch/utils/_appending_byte_serializer.py BytesWriter), the last of them the cache artifacts;
- the cache artifacts (torch/compiler/_cache.py): a CRC32, a format version (8 bytes), then per
  cache type its name (a length-prefixed base64 string), a count (8 bytes) and per artifact its key
  (base64) and content (length-prefixed bytes: a pickle, or an autotune result's JSON).

``rewrite`` walks these, and in every pickle replaces each string that *is* a path under a building
root (a string that only mentions one, such as generated source code or a repro script, is text no
loader follows and stays as it is), recursing into nested bytes; lengths, frames and CRCs are
written anew. A blob of none of these forms is refused (ValueError): the install then leaves that
file out rather than install a path it cannot move.
"""

from __future__ import annotations

import pickletools
import struct
import zlib
from typing import Callable

STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
BYTES = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8"}


HEADER = b"CacheCompiledArtifact"  # a standalone-compile artifact's first field (torch 2.11 on)


def rewrite(data: bytes, moved: Callable[[str], str | None], needles: tuple, nested: bool = False) -> bytes:
    """`data` with every path string under a building root moved (`moved`: the path here, or None
    to leave it); `needles`: the building roots as bytes (a blob naming none is left as it is).
    ValueError for a file of none of the forms above; bytes inside one that are of none of them (a
    kernel's cubin, say) are data whose paths nothing follows, and stay as they are."""
    if not any(n in data for n in needles):
        return data
    if _is_pickle(data):
        return _rewrite_pickle(data, moved, needles)
    fields = _fields(data, 4) if _checksummed(data) else None
    if fields is not None and (fields[0] == HEADER or len(fields) == 3):  # a standalone-compile artifact
        return _checksum(b"".join(_framed(rewrite(f, moved, needles, True)) for f in fields))
    items = _cache_artifacts(data) if _checksummed(data) else None
    if items is not None:
        body = bytearray(data[4:12])  # the format version
        for kind, artifacts in items:
            body += _framed(kind) + len(artifacts).to_bytes(8, "big")
            for key, content in artifacts:
                body += _framed(key) + _framed(rewrite(content, moved, needles, True))
        return _checksum(bytes(body))
    if nested:
        return data
    raise ValueError("not a pickle, a torch artifact or torch's cache artifacts")


def _is_pickle(data: bytes) -> bool:
    if data[:1] != b"\x80":
        return False
    try:
        *_, (op, _, pos) = pickletools.genops(data)
    except Exception:  # noqa: BLE001 - whatever pickletools says of bytes that are no pickle
        return False
    return op.name == "STOP" and pos + 1 == len(data)


def _rewrite_pickle(data: bytes, moved, needles) -> bytes:
    ops = list(pickletools.genops(data))
    out, changed = bytearray(), False
    for i, (op, arg, pos) in enumerate(ops):
        raw = data[pos:ops[i + 1][2] if i + 1 < len(ops) else len(data)]
        new = None
        if op.name in STRINGS and isinstance(arg, str) and arg.startswith("/"):
            path = moved(arg)
            new = _unicode(path) if path is not None and path != arg else None
        elif op.name in BYTES and any(n in arg for n in needles):
            inner = rewrite(bytes(arg), moved, needles, True)
            new = _bytes(inner, op.name == "BYTEARRAY8") if inner != arg else None
        if new is not None:
            out += new
            changed = True
        elif op.name != "FRAME":  # frames only group opcodes for reading: a pickle needs none
            out += raw
    return bytes(out) if changed else data


def _unicode(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) < 256:
        return b"\x8c" + bytes([len(data)]) + data
    if len(data) < 1 << 32:
        return b"X" + struct.pack("<I", len(data)) + data
    return b"\x8d" + struct.pack("<Q", len(data)) + data


def _bytes(data: bytes, bytearray_op: bool) -> bytes:
    if bytearray_op:
        return b"\x96" + struct.pack("<Q", len(data)) + data
    if len(data) < 256:
        return b"C" + bytes([len(data)]) + data
    if len(data) < 1 << 32:
        return b"B" + struct.pack("<I", len(data)) + data
    return b"\x8e" + struct.pack("<Q", len(data)) + data


def _checksummed(data: bytes) -> bool:
    return len(data) >= 4 and zlib.crc32(data[4:]).to_bytes(4, "big") == data[:4]


def _checksum(body: bytes) -> bytes:
    return zlib.crc32(body).to_bytes(4, "big") + body


def _framed(field: bytes) -> bytes:
    return len(field).to_bytes(8, "big") + field


def _fields(data: bytes, at: int, most: int = 8) -> list | None:
    """The length-prefixed fields of `data` from `at`, or None when they do not end at its end."""
    out = []
    while at < len(data) and len(out) < most:
        if at + 8 > len(data):
            return None
        size = int.from_bytes(data[at:at + 8], "big")
        out.append(data[at + 8:at + 8 + size])
        at += 8 + size
    return out if at == len(data) else None


def _cache_artifacts(data: bytes) -> list | None:
    """[(cache type, [(key, content)])] of torch's serialized cache artifacts, or None."""
    at, items = 12, []
    try:
        while at < len(data):
            kind, at = _read(data, at)
            count, at = int.from_bytes(data[at:at + 8], "big"), at + 8
            artifacts = []
            for _ in range(count):
                key, at = _read(data, at)
                content, at = _read(data, at)
                artifacts.append((key, content))
            items.append((kind, artifacts))
    except IndexError:
        return None
    return items if at == len(data) and len(data) >= 12 else None


def _read(data: bytes, at: int) -> tuple[bytes, int]:
    size = int.from_bytes(data[at:at + 8], "big")
    if at + 8 > len(data) or at + 8 + size > len(data):
        raise IndexError(at)
    return data[at + 8:at + 8 + size], at + 8 + size
