"""Relocation rules a mutation pass found untested (issue 44 item 7): what an install does with a
path that is not the building machine's, the permission bits of a file it rewrites, its default
(an install writes), and what `bundle inspect`'s summary of the relocation says."""

from __future__ import annotations

import os
import pathlib
import pickle
import stat
from types import SimpleNamespace

import pytest

from executor.caches.family import Family, PathRule
from executor.caches.inductor import rewrite_pickled
from executor.caches.relocate import Outcome, Relocation, relocate_family, summary_lines


def example_family() -> Family:
    """A family whose `.idx` files name a file by absolute path, which its loader follows."""
    return Family(name="example", label="Example", root=lambda env: None, collect=None, place=None,
                  paths=(PathRule(lambda rel, path: rel.endswith(".idx"),
                                  lambda data, reloc, final: reloc.moved(data.decode()).encode(),
                                  "its index names its file"),))


def staged_index(tmp_path, mode: int) -> tuple[str, str, Relocation]:
    """A staged `k.idx` naming the building machine's /built/ex/k.bin: (staged dir, its file, relocation)."""
    staged = tmp_path / "staged"
    staged.mkdir()
    index = staged / "k.idx"
    index.write_text("/built/ex/k.bin")
    os.chmod(index, mode)
    return str(staged), str(index), Relocation.of({"example": "/built/ex"}, {"example": str(tmp_path / "here")})


def test_a_path_under_no_building_root_is_left_as_it_is():
    relocation = Relocation.of({"triton": "/built/triton", "inductor": "/built/inductor"},
                               {"triton": "/here/triton"})
    assert relocation.moved("/site-packages/vllm/sample.py") == "/site-packages/vllm/sample.py"
    assert relocation.moved("/built/triton/ab/k.cubin") == "/here/triton/ab/k.cubin"
    assert relocation.moved("/built/inductor/fx/k") is None  # no inductor root here


def test_an_install_rewrites_by_default(tmp_path):
    staged, index, relocation = staged_index(tmp_path, 0o644)
    outcome = relocate_family(example_family(), staged, str(tmp_path / "here"), relocation)
    assert outcome.rewritten == ("k.idx",)
    assert pathlib.Path(index).read_text() == str(tmp_path / "here" / "k.bin")


def test_a_rewritten_file_keeps_its_permission_bits(tmp_path):
    staged, index, relocation = staged_index(tmp_path, 0o755)
    relocate_family(example_family(), staged, str(tmp_path / "here"), relocation)
    assert pathlib.Path(index).read_text() == str(tmp_path / "here" / "k.bin")
    assert stat.S_IMODE(os.stat(index).st_mode) == 0o755


def test_the_summary_counts_kept_files_by_reason_lists_those_left_out_and_skips_untouched_families():
    outcomes = {
        "inductor": Outcome(rewritten=("a",), kept=(("b", "comments only"), ("c", "comments only"), ("d", "debug info")),
                            dropped=(("e", "no rule"), ("f", "no rule"))),
        "triton": Outcome(),
    }
    assert summary_lines(outcomes) == [
        "inductor: 1 rewritten for the installing machine, 3 kept (no loader follows the paths), 2 not installed",
        "  kept (2): comments only",
        "  kept (1): debug info",
        "  not installed: inductor/e",
        "  not installed: inductor/f",
    ]


def standalone_artifact(entry: bytes, header: bool, autotune: bytes | None = None) -> bytes:
    """A standalone-compile artifact written by torch's own serializers, with the header field torch
    2.11 on writes first, or without it (the three fields of the torch releases before); with an
    autotune result (JSON) besides the Inductor entry where `autotune` is given."""
    from torch.compiler._cache import _serialize_single_cache
    from torch.utils._appending_byte_serializer import (
        AppendingByteSerializer,
        BytesWriter,
    )

    artifacts = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    if autotune is not None:
        artifacts.append(("autotune", [SimpleNamespace(key="zr/k.best_config", content=autotune)]))
    artifacts.append(("inductor", [SimpleNamespace(key="fkey", content=entry)]))
    writer = BytesWriter()
    if header:
        writer.write_bytes(b"CacheCompiledArtifact")
    writer.write_bytes(b"torchkey")
    writer.write_str("graphkey")
    writer.write_bytes(artifacts.to_bytes())
    return writer.to_bytes()


def inductor_entries(data: bytes, header: bool) -> list:
    """The Inductor entries of a standalone-compile artifact, read with torch's own readers."""
    from torch.compiler._cache import CacheArtifactManager
    from torch.utils._appending_byte_serializer import BytesReader

    reader = BytesReader(data)
    fields = [reader.read_bytes() for _ in range(3 if header else 2)] + [reader.read_bytes()]
    assert reader.is_finished()
    return [pickle.loads(a.content) for a in CacheArtifactManager.deserialize(fields[-1])["inductor"]]


@pytest.mark.parametrize("header", [True, False], ids=["torch-2.11-header", "no-header"])
def test_a_standalone_artifact_has_its_paths_moved_with_or_without_the_header(header):
    """Each kernel's .best_config path is moved, in the artifact torch 2.11 on writes and in the
    three-field one of the releases before; text that only mentions the path stays as it is."""
    pytest.importorskip("torch")
    entry = pickle.dumps({"best_config": "/built/inductor/zr/k.best_config",
                          "source_code": "# kernel path: /built/inductor/zr/ck.py\n"}, protocol=4)
    relocation = Relocation.of({"inductor": "/built/inductor"}, {"inductor": "/here/inductor"})
    data = rewrite_pickled(standalone_artifact(entry, header), relocation, "/here/inductor/a")
    assert inductor_entries(data, header) == [{"best_config": "/here/inductor/zr/k.best_config",
                                                "source_code": "# kernel path: /built/inductor/zr/ck.py\n"}]


def test_bytes_inside_an_artifact_that_are_no_pickle_stay_as_they_are_whatever_they_name():
    """An autotune result's JSON that names the building path is data no loader follows there: the
    Inductor entry beside it is rewritten, the JSON kept byte for byte (and the file installed)."""
    pytest.importorskip("torch")
    from torch.compiler._cache import CacheArtifactManager
    from torch.utils._appending_byte_serializer import BytesReader

    tuned = b'{"XBLOCK": 64, "found_for": "/built/inductor/zr/ck.py"}'
    entry = pickle.dumps({"best_config": "/built/inductor/zr/k.best_config"}, protocol=4)
    relocation = Relocation.of({"inductor": "/built/inductor"}, {"inductor": "/here/inductor"})
    data = rewrite_pickled(standalone_artifact(entry, True, autotune=tuned), relocation, "/here/inductor/a")
    reader = BytesReader(data)
    artifacts = CacheArtifactManager.deserialize([reader.read_bytes() for _ in range(4)][-1])
    assert [a.content for a in artifacts["autotune"]] == [tuned]
    assert [pickle.loads(a.content) for a in artifacts["inductor"]] == [{"best_config": "/here/inductor/zr/k.best_config"}]
