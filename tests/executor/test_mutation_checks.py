"""Placed-file checks a mutation pass found untested (issue 44 item 7): where an ELF's section
headers end decides whether a cubin is whole, a header that is cut, 32-bit or big-endian, a file
named like a cubin that is no ELF, an unpacked torch artifact, a file that cannot be read."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from executor.caches.checks import (
    by_kind,
    elf_problem,
    file_check,
    group_problem,
    torch_artifact_problem,
)

SHOFF, SHENTSIZE, SHNUM = 200, 64, 5
WHOLE = SHOFF + SHENTSIZE * SHNUM  # where the section headers end: the file's size


def elf(order: str = "<", size: int = WHOLE, elf_class: int = 2) -> bytes:
    """An ELF file of `size` bytes whose header places SHNUM section headers of SHENTSIZE at SHOFF."""
    ident = b"\x7fELF" + bytes([elf_class, 1 if order == "<" else 2, 1]) + bytes(9)
    header = bytearray(ident + bytes(64 - len(ident)))
    struct.pack_into(order + "Q", header, 0x28, SHOFF)
    struct.pack_into(order + "HHH", header, 0x3A, SHENTSIZE, SHNUM, SHNUM - 1)
    return bytes(header) + bytes(size - len(header))


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
def test_an_elf_is_whole_exactly_when_its_section_headers_end_inside_it(tmp_path, order):
    whole, cut = tmp_path / "whole.cubin", tmp_path / "cut.cubin"
    whole.write_bytes(elf(order))
    cut.write_bytes(elf(order, WHOLE - 1))
    assert elf_problem(str(whole)) is None
    assert elf_problem(str(cut)) == f"cut short: its section headers end at byte {WHOLE}, the file has {WHOLE - 1}"


def test_an_elf_cut_inside_its_header_or_of_32_bits_is_refused(tmp_path):
    short, elf32 = tmp_path / "short.so", tmp_path / "elf32.so"
    short.write_bytes(elf()[:63])
    elf32.write_bytes(elf(elf_class=1))
    assert elf_problem(str(short)) == "a cut or 32-bit ELF header"
    assert elf_problem(str(elf32)) == "a cut or 32-bit ELF header"


def test_a_file_named_like_a_cubin_or_a_library_that_is_no_elf_is_removed(tmp_path):
    for name in ("k.cubin", "k.so"):
        path = tmp_path / name
        path.write_bytes(b"#!/bin/sh\n" + bytes(100))
        assert by_kind(str(path)) == "not an ELF file"
        assert [(u.path, u.why, u.removes) for u in file_check(str(tmp_path), str(path))] == \
            [(str(path), "not an ELF file", True)]


def test_a_file_that_cannot_be_read_is_unreadable(tmp_path):
    missing = str(tmp_path / "gone.cubin")
    assert elf_problem(missing) == "unreadable (No such file or directory)"
    assert torch_artifact_problem(missing) == "unreadable (No such file or directory)"


@pytest.mark.parametrize("entries, whole", [(["one"], True), ([], False), (["one", "two"], False), (None, False)],
                         ids=["one-entry", "none", "two", "no-aotautograd"])
def test_an_unpacked_torch_artifact_is_whole_with_exactly_one_aotautograd_entry(tmp_path, entries, whole):
    artifact = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    artifact.mkdir()
    if entries is not None:
        (artifact / "aotautograd").mkdir()
        for entry in entries:
            (artifact / "aotautograd" / entry).mkdir()
    problem = torch_artifact_problem(str(artifact))
    assert problem == (None if whole else "an unpacked artifact without its one aotautograd entry")


def fields(*sizes: int) -> bytes:
    """Length-prefixed fields (8-byte big-endian sizes) of the given sizes, as torch frames them."""
    return b"".join(n.to_bytes(8, "big") + bytes([7]) * n for n in sizes)


def checksummed(body: bytes) -> bytes:
    return zlib.crc32(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("data", [
    checksummed(fields(21, 8, 8, 300)),       # header, torch's key, the graph's key, the artifacts
    checksummed(fields(8, 8, 300)),           # no header
    fields(8, 8, 300),                        # no checksum
    fields(*[5] * 8),                         # the most fields an artifact has
    checksummed(fields(8, 8, 0)),             # an empty last field
], ids=["header", "no-header", "no-checksum", "eight-fields", "empty-last"])
def test_a_torch_artifact_whose_fields_end_at_its_end_is_whole(tmp_path, data):
    path = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    path.write_bytes(data)
    assert torch_artifact_problem(str(path)) is None


@pytest.mark.parametrize("data", [
    checksummed(fields(21, 8, 8, 300))[:-1],  # cut inside its last field
    fields(8, 8, 300)[:-1],
    fields(8, 8, 300) + (9).to_bytes(8, "big")[:5],  # cut inside a length
    fields(8, 300),                           # too few fields
    fields(*[5] * 9),                         # more fields than an artifact has
    b"\0\0\0\0" + fields(21, 8, 8, 300),      # a checksum that does not match
], ids=["cut", "cut-no-checksum", "cut-in-a-length", "two-fields", "nine-fields", "bad-checksum"])
def test_a_cut_or_corrupted_torch_artifact_is_refused(tmp_path, data):
    path = tmp_path / "artifact_compile_range_1_8192_subgraph_0"
    path.write_bytes(data)
    assert torch_artifact_problem(str(path)) == "not a whole torch artifact (cut short or corrupted)"


def test_a_triton_group_naming_a_file_that_is_not_there_is_refused(tmp_path):
    there = tmp_path / "k.cubin"
    there.write_bytes(b"x")
    group = tmp_path / "__grp__k.json"
    group.write_text(json.dumps({"child_paths": {"k.cubin": str(there), "k.json": str(tmp_path / "k.json")}}))
    assert group_problem(str(group)) == f"lists {tmp_path / 'k.json'}, which is not there"
    (tmp_path / "k.json").write_text("{}")
    assert group_problem(str(group)) is None
