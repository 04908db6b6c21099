"""What must hold of a placed cache file for its loader to take it without failing (issue 43 item 3).

A bundle's members are checked against their sha256 at install, so a member is what the building
machine packed; but what it packed may be incomplete (a file written while it was packed, a cache
left half-written by a crash there) or may name a file the bundle lacks. Several loaders do not
survive that: vLLM 0.25's compile cache opens each artifact it lists, and a missing or cut one is
an exception vLLM does not catch (its engine core exits); Triton parses its group and metadata
files without a guard; a cut cubin or shared library fails at load. Each check here answers with
the reason a file would fail (None: it would load), without importing the library that loads it.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

from .family import Unresolved

ELF_MAGIC = b"\x7fELF"


def json_problem(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"not valid JSON ({type(e).__name__})"
    return None


def elf_problem(path: str) -> str | None:
    """A cubin or shared library that is cut short: its section headers, which the ELF header
    places at e_shoff, e_shnum entries of e_shentsize bytes, end past the file's end."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if head[:4] != ELF_MAGIC:
        return "not an ELF file"
    if len(head) < 64 or head[4] != 2:  # ELFCLASS64: what CUDA and x86-64 write
        return "a cut or 32-bit ELF header"
    order = "<" if head[5] == 1 else ">"
    shoff, = struct.unpack_from(order + "Q", head, 0x28)
    shentsize, shnum = struct.unpack_from(order + "HH", head, 0x3A)
    end = shoff + shentsize * shnum
    if end > size:
        return f"cut short: its section headers end at byte {end}, the file has {size}"
    return None


def torch_artifact_problem(path: str) -> str | None:
    """A torch standalone-compile artifact in its "binary" form (torch/_inductor/standalone_compile.py:
    length-prefixed fields, framed by torch/utils/_appending_byte_serializer.py: a header where torch
    writes one, torch's key, the graph's key, the cache artifacts; a CRC32 of the rest in the first 4
    bytes where torch writes one) that is whole: its fields end exactly at the file's end (a cut file
    ends inside its last one). The "unpacked" form is a directory holding one aotautograd entry."""
    if os.path.isdir(path):
        entries = os.listdir(os.path.join(path, "aotautograd")) if os.path.isdir(os.path.join(path, "aotautograd")) else []
        return None if len(entries) == 1 else "an unpacked artifact without its one aotautograd entry"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"unreadable ({e.strerror})"
    checksummed = len(data) >= 4 and zlib.crc32(data[4:]).to_bytes(4, "big") == data[:4]
    if (checksummed and _framed(data, 4)) or _framed(data, 0):
        return None
    return "not a whole torch artifact (cut short or corrupted)"


def _framed(data: bytes, at: int, fewest: int = 3, most: int = 8) -> bool:
    """Whether `data` from `at` is `fewest` to `most` length-prefixed fields (8-byte big-endian sizes)
    that end exactly at its end."""
    fields = 0
    while at < len(data) and fields < most:
        if at + 8 > len(data):
            return False
        at += 8 + int.from_bytes(data[at:at + 8], "big")
        fields += 1
    return at == len(data) and fields >= fewest


def group_problem(path: str) -> str | None:
    """A Triton group file that lists a file which is not there (Triton would compile the kernel
    again: a relocation that missed shows here)."""
    with open(path, encoding="utf-8") as f:
        listed = (json.load(f).get("child_paths") or {}).values()
    missing = [p for p in listed if not os.path.isfile(p)]
    return f"lists {missing[0]}, which is not there" if missing else None


def by_kind(path: str) -> str | None:
    """The check a file's kind calls for: JSON files parse, cubins and shared libraries are whole."""
    if path.endswith(".json"):
        return json_problem(path)
    if path.endswith((".cubin", ".so")):
        return elf_problem(path)
    return None


def file_check(root: str, path: str) -> list[Unresolved]:
    """The check by kind, for a family whose unit is the file (the file goes when it fails)."""
    problem = by_kind(path)
    return [Unresolved(path, problem)] if problem else []
