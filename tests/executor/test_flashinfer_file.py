"""One default for the plan's FlashInfer autotune file (issue 56 item 1): `warmup execute` keeps it,
and `warmup bundle install` places a plan bundle's, at the same path when neither is given
`--flashinfer-cache`: executor/caches/flashinfer_file.py default_path, keyed by FlashInfer's
version and the GPU's name (the bundle's fingerprint at install, which the install checks against
the machine; the backend's own reading at execute)."""

from __future__ import annotations

import os
import types

import pytest

from executor.backends import flashinfer as fib
from executor.bundle import archive, cli, environment
from executor.caches import flashinfer_file
from executor.caches.registry import CacheRoots
from executor.caches.roots import Env
from test_bundle import built, fingerprint, parse, rewrite  # noqa: F401 - fixtures
from test_flashinfer_backend import fake, step  # noqa: F401 - fixtures

VERSION, GPU = "0.6.18", "NVIDIA H100 80GB HBM3"
NO_VARIABLES = ("WARMUP_FLASHINFER_CACHE_DIR", "XDG_CACHE_HOME")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of the test's own, and none of the variables that move the default."""
    for name in NO_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("variable, expected", [
    (None, "home/.cache/warmup-planner/flashinfer_autotune"),
    ("XDG_CACHE_HOME", "xdg/warmup-planner/flashinfer_autotune"),
    ("WARMUP_FLASHINFER_CACHE_DIR", "fi"),
])
def test_the_default_honours_the_variables_as_before(home, tmp_path, monkeypatch, variable, expected):
    values = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "WARMUP_FLASHINFER_CACHE_DIR": str(tmp_path / "fi")}
    if variable == "WARMUP_FLASHINFER_CACHE_DIR":  # it wins over XDG_CACHE_HOME
        monkeypatch.setenv("XDG_CACHE_HOME", values["XDG_CACHE_HOME"])
    if variable:
        monkeypatch.setenv(variable, values[variable])
    want = str(tmp_path / expected / VERSION / "NVIDIA_H100_80GB_HBM3" / "autotune_configs.json")
    assert flashinfer_file.default_path(VERSION, GPU) == want
    assert flashinfer_file.default_path(VERSION, GPU, dict(os.environ)) == want  # an environment given
    env = Env.of(dict(os.environ), fingerprint={"flashinfer": VERSION, "gpu": GPU})
    assert flashinfer_file.root(env) == want


def test_no_default_without_the_version_or_the_gpu(home):
    assert flashinfer_file.root(Env.of({})) is None
    assert flashinfer_file.root(Env.of({}, fingerprint={"flashinfer": None, "gpu": GPU})) is None
    assert flashinfer_file.root(Env.of({}, fingerprint={"flashinfer": VERSION, "gpu": None})) is None
    roots = CacheRoots.resolve({}, families=["flashinfer"], fingerprint={"flashinfer": VERSION, "gpu": GPU})
    assert roots["flashinfer"] == flashinfer_file.default_path(VERSION, GPU, {})


def execute_reads(monkeypatch, fake) -> str:  # noqa: F811 - the fixture's function
    """The file `warmup execute`'s FlashInfer backend uses without --flashinfer-cache, on a GPU named
    GPU with FlashInfer VERSION."""
    torch = pytest.importorskip("torch")
    fake()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU)
    backend = fib.FlashInferBackend("cuda:0", types.SimpleNamespace(flashinfer_cache=None))
    details: dict = {}
    path, _ = backend._cache_file(step(), None, VERSION, details)
    assert details["cache_file"] == path
    return path


def plan_bundle(built, tmp_path, monkeypatch, **changes):  # noqa: F811
    """The plan bundle of test_bundle's `built`, its fingerprint naming FlashInfer VERSION on a GPU
    named GPU (or `changes`), installed on a machine of the same fingerprint."""
    out, manifest = built
    fp = fingerprint(**{"flashinfer": VERSION, "gpu": GPU, **changes})
    bundle = tmp_path / "fi.warmup"
    rewrite(out, bundle, manifest._replace(fingerprint=fp))
    monkeypatch.setattr(environment, "measure", lambda: fp)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    return bundle


@pytest.mark.parametrize("variable", [None, "XDG_CACHE_HOME", "WARMUP_FLASHINFER_CACHE_DIR"])
def test_install_places_the_file_where_execute_reads_it(built, home, tmp_path, monkeypatch, fake,  # noqa: F811
                                                        variable):
    if variable:
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    bundle = plan_bundle(built, tmp_path, monkeypatch)
    assert cli.cmd_bundle(parse(["install", str(bundle), "--triton-cache", str(tmp_path / "t")])) == 0
    read = execute_reads(monkeypatch, fake)
    assert os.path.isfile(read) and open(read).read() == "{}"  # the bundle's file
    assert read == flashinfer_file.default_path(VERSION, GPU)
    assert not os.path.exists(tmp_path / "dg" / "flashinfer-autotune.json")  # the second default, gone


def test_flashinfer_cache_still_overrides_install(built, home, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WARMUP_FLASHINFER_CACHE_DIR", str(tmp_path / "default"))
    bundle = plan_bundle(built, tmp_path, monkeypatch)
    given = tmp_path / "given" / "autotune.json"
    given.parent.mkdir()
    argv = ["install", str(bundle), "--triton-cache", str(tmp_path / "t"), "--flashinfer-cache", str(given)]
    assert cli.cmd_bundle(parse(argv)) == 0
    assert given.read_text() == "{}" and not (tmp_path / "default").exists()


def test_a_fingerprint_without_a_flashinfer_version_needs_the_option(built, home, tmp_path, monkeypatch,  # noqa: F811
                                                                      capsys):
    """A bundle holding the file, from a machine whose fingerprint names no FlashInfer version: no
    default to key it by, so one line asking for --flashinfer-cache, and nothing written."""
    monkeypatch.setenv("WARMUP_FLASHINFER_CACHE_DIR", str(tmp_path / "default"))
    bundle = plan_bundle(built, tmp_path, monkeypatch, flashinfer=None)
    assert "flashinfer/autotune.json" in [f.path for f in archive.read_manifest(str(bundle)).files]
    assert cli.cmd_bundle(parse(["install", str(bundle), "--triton-cache", str(tmp_path / "t")])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused: the bundle holds flashinfer files" in err
    assert "give --flashinfer-cache" in err
    assert not (tmp_path / "t").exists() and not (tmp_path / "default").exists()
    assert not (tmp_path / "dg" / "cache").exists()
