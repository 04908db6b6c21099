"""Where a bundle comes from is one table of schemes (executor/bundle/sources/): each row a module
with its SCHEME, `claims` and `opened`, its Source a `sources.Source`. A new scheme is one module and
one row, and both front doors take it unchanged: here a fictitious `mem://`, a bundle kept in the
process's memory, opened by `warmup bundle inspect` and by the plugin's WARMUP_BUNDLE alike."""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys

import pytest

from executor.bundle import cli, sources
from test_bundle import parse
from test_bundle_oci import make_bundle, sha
from vllm_bridge.bundles import source as bundle_source

MEM_SCHEME = '''"""mem://NAME[@sha256:D]: a bundle this process keeps in BUNDLES (a scheme no one has)."""
import hashlib
import os
from typing import NamedTuple

from executor.bundle.sources.protocol import Fetched

SCHEME = "mem"
BUNDLES = {}


def claims(value):
    return value.startswith("mem://")


def opened(value, *, where="reference"):
    key, _, digest = value[len("mem://"):].partition("@")
    return MemSource(key, digest or None)


class MemSource(NamedTuple):
    key: str
    digest: str | None = None
    remote = True

    @property
    def name(self):
        return f"mem://{self.key}" + (f"@{self.digest}" if self.digest else "")

    def pin(self, *, timeout_s, plain_http=False, environ=os.environ):
        return self._replace(digest="sha256:" + hashlib.sha256(BUNDLES[self.key]).hexdigest())

    def path(self, cache_dir=None):
        return os.path.join(cache_dir, "mem", self.digest.replace(":", "-") + ".bundle")

    def fetch(self, cache_dir=None, *, timeout_s, server="", plain_http=False, environ=os.environ):
        os.makedirs(os.path.join(cache_dir, "mem"), exist_ok=True)
        with open(self.path(cache_dir), "wb") as f:
            f.write(BUNDLES[self.key])
        return Fetched(self.path(cache_dir), Brought(self.name, len(BUNDLES[self.key])))


class Brought(NamedTuple):
    reference: str
    size: int
'''


@pytest.fixture
def mem(tmp_path, monkeypatch):
    """The fictitious scheme: its module, and its row at the head of the table."""
    (tmp_path / "mem_scheme.py").write_text(MEM_SCHEME)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("mem_scheme")
    make_bundle(tmp_path / "b.warmup")
    module.BUNDLES["b"] = (tmp_path / "b.warmup").read_bytes()
    monkeypatch.setattr(sources, "SCHEMES", {"mem": module, **sources.SCHEMES})
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))  # where the plugin checks what it fetched
    yield module
    monkeypatch.delitem(sys.modules, "mem_scheme")


def test_each_row_is_its_schemes_module_and_the_file_row_comes_last(tmp_path):
    assert list(sources.SCHEMES) == ["oci", "directory", "file"]
    for scheme, module in sources.SCHEMES.items():
        assert module.SCHEME == scheme and callable(module.claims) and callable(module.opened)
    assert list(sources.SCHEMES.values())[-1].claims("anything at all")
    for value, scheme in [("oci://localhost:5000/w:v1", "oci"), (str(tmp_path), "directory"),
                          (str(tmp_path / "b.warmup"), "file")]:
        opened = sources.open_source(value)
        assert isinstance(opened, sources.Source) and type(opened).__module__.endswith(f".sources.{scheme}")
        assert opened.remote == (scheme == "oci") and opened.name == value


def test_a_new_scheme_is_one_module_and_one_row_the_cli_opens(mem, tmp_path, capsys):
    assert isinstance(mem.opened("mem://b"), sources.Source)
    assert cli.cmd_bundle(parse(["inspect", "mem://b"])) == 0
    assert capsys.readouterr().out.startswith("bundle mem://b: plan vllm-0.25-plugin, engine an-engine")


def test_a_new_scheme_is_one_module_and_one_row_the_plugin_opens(mem, tmp_path, caplog):
    environ = {"WARMUP_BUNDLE": "mem://b"}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        path, waited = bundle_source.start("mem://b", 60, environ, str(tmp_path / "cache")).wait()
    digest = "sha256:" + hashlib.sha256(mem.BUNDLES["b"]).hexdigest()
    assert environ["WARMUP_BUNDLE"] == f"mem://b@{digest}" and bundle_source.SERVER in environ  # handed down
    assert path == os.path.join(tmp_path, "cache", "mem", digest.replace(":", "-") + ".bundle")
    assert sha(path) == sha(tmp_path / "b.warmup") and waited is not None
    pinned, pulled = [r.getMessage() for r in caplog.records]
    assert pinned.startswith(f"warmup-planner: bundle mem://b is {digest} (the registry answered in ")
    assert pulled.startswith(f"warmup-planner: bundle mem://b@{digest} pulled to {path} (")


def test_without_its_row_the_name_is_a_file_that_is_not_there(tmp_path, capsys):
    assert cli.cmd_bundle(parse(["inspect", "mem://b"])) == 2
    assert capsys.readouterr().err.count("\n") == 1
