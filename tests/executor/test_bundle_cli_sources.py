"""`warmup bundle install|verify|inspect` open their argument as the plugin opens WARMUP_BUNDLE, through
the table of sources (executor/bundle/sources/): a file, a directory holding one (an image volume), an
oci:// reference pulled for the command's length (the CNCF registry on loopback,
tests/executor/registry_server.py), nothing of it left behind. A name its scheme refuses is one line
and exit 2; a registry that cannot be used is one line and exit 1, as for `warmup bundle pull`."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from executor.bundle import archive, cli, environment, usage
from executor.caches.roots import default_vllm_cache_root
from registry_server import free_port, serve
from test_bundle import parse
from test_bundle_oci import push
from test_startup_bundle import bundle, environ, no_cache_variables, vllm_fp  # noqa: F401 - fixtures


@pytest.fixture
def registry(tmp_path, monkeypatch):
    server = serve("open", str(tmp_path), monkeypatch)
    yield server
    server.kill()


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine to install a start-up bundle on (its caches empty), whose temporary files are
    kept under tmp/ (so that what a command leaves there is seen)."""
    monkeypatch.setattr(environment, "measure", lambda: vllm_fp())
    monkeypatch.setattr(usage, "records_reads", lambda root: True)
    for key, value in environ(tmp_path / "serve").items():
        monkeypatch.setenv(key, value)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "serve"


def pulled_into(folder) -> list[str]:
    """What the commands' pulls left in the temporary folder (the install's own lock files are not theirs)."""
    return [name for name in os.listdir(folder) if name.startswith("warmup-bundle-source-")]


def run(argv, capsys) -> tuple[int, list[str], str]:
    code = cli.cmd_bundle(parse(argv))
    printed = capsys.readouterr()
    return code, printed.out.splitlines(), printed.err


def install_inspect_verify(name: str, capsys) -> list[str]:
    """The three commands on the bundle `name`; inspect's first line."""
    code, inspected, err = run(["inspect", name], capsys)
    assert code == 0, err
    code, installed, err = run(["install", name], capsys)
    assert code == 0 and installed[0].startswith("installed: triton 1 new (0 already there), deep_gemm 1 new"), err
    code, used, err = run(["verify", name], capsys)
    assert code == 0 and used and all(line.startswith("bundle use: ") for line in used), err
    return inspected


def test_a_directory_is_the_bundle_it_holds(bundle, machine, tmp_path, capsys):
    volume = tmp_path / "volume"
    volume.mkdir()
    shutil.copy(bundle[0], volume / "s.warmup")
    (volume / "README").write_text("an image volume may hold other files")
    inspected = install_inspect_verify(str(volume), capsys)
    assert inspected[0].startswith(f"bundle {volume}: a vLLM start-up (plan vllm-0.25-plugin), engine llama")
    assert os.path.isdir(machine / "vllm" / "torch_compile_cache")


def test_an_oci_reference_is_pulled_for_the_command_and_nothing_of_it_is_left(bundle, machine, registry, tmp_path,
                                                                              capsys):
    tag = f"oci://{registry.address}/warmup/llama:v1"
    push(bundle[0], tag)
    inspected = install_inspect_verify(tag, capsys)
    assert inspected[0].startswith(f"bundle {tag}: a vLLM start-up (plan vllm-0.25-plugin), engine llama")
    assert os.path.isdir(machine / "vllm" / "torch_compile_cache")
    assert pulled_into(tmp_path / "tmp") == []  # each pull's temporary directory removed


def recorded(bundle_file) -> str:
    """What the install record under vLLM's cache root, found by the bundle's digest, says the bundle is."""
    record = usage.load(usage.record_path(default_vllm_cache_root(), archive.read_manifest(bundle_file).digest()))
    assert record is not None, "no install record where `warmup bundle verify` looks for it"
    return record.bundle


def test_the_install_record_names_where_an_oci_bundle_came_from_not_its_temporary_file(bundle, machine, registry,
                                                                                       tmp_path, capsys):
    """The pulled file lives in a temporary directory for the command's length: the record names
    the reference, pinned to the digest it resolved to, and verify still finds the record."""
    tag = f"oci://{registry.address}/warmup/llama:v1"
    pinned = str(push(bundle[0], tag).reference)
    assert pinned.startswith(tag + "@sha256:")
    code, _, err = run(["install", tag], capsys)
    assert code == 0, err
    assert recorded(bundle[0]) == pinned
    code, used, err = run(["verify", tag], capsys)
    assert code == 0 and used and all(line.startswith("bundle use: ") for line in used), err


@pytest.mark.parametrize("given", ["volume", "volume/s.warmup"])
def test_the_install_record_names_the_directory_or_the_file_given(given, bundle, machine, tmp_path, capsys):
    (tmp_path / "volume").mkdir()
    shutil.copy(bundle[0], tmp_path / "volume" / "s.warmup")
    code, _, err = run(["install", str(tmp_path / given)], capsys)
    assert code == 0 and recorded(bundle[0]) == str(tmp_path / given), err


@pytest.mark.parametrize("command", ["install", "verify", "inspect"])
def test_a_name_its_scheme_refuses_is_one_line_and_exit_2(command, machine, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run([command, str(tmp_path / "empty")], capsys)
    assert code == 2 and err == (f"warmup: error: {tmp_path / 'empty'}: a bundle directory must hold one warmup "
                                 "bundle; it holds no warmup bundle\n")
    code, _, err = run([command, "oci://registry.example/Upper:v1"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("warmup: error: oci://registry.example/Upper:v1: not a valid reference: its repository")


@pytest.mark.parametrize("command", ["install", "verify", "inspect"])
def test_a_registry_that_is_not_there_is_one_line_and_exit_1(command, machine, tmp_path, capsys):
    code, _, err = run([command, f"oci://127.0.0.1:{free_port()}/w:v1", "--timeout", "10"], capsys)
    assert code == 1 and err.count("\n") == 1 and "cannot be reached" in err
    assert pulled_into(tmp_path / "tmp") == []
