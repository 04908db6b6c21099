"""The JIT monitor is built from the cache families' table (issue 56 item 1): each monitored family's
row names its watcher and its counters, so a new monitored family is its module and one row. The
fictitious family here is both (this module, and the row added to the table); nothing else changes,
and the monitor watches it, counts it per step, before and after the seal, and reports it."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from executor import jit_monitor
from executor.caches import registry
from executor.caches.family import Counter, Family, Monitored
from executor.caches.roots import Env
from executor.caches.tree import Placed
from executor.caches.watcher import Watcher
from executor.jit_monitor import JitAfterSealError, Monitor, StepCounts

LIBRARY = "fake_jit_library"  # the library the fictitious family's compiles happen in


class FakeWatcher(Watcher):
    """Wraps the library's `compile` as FlashInfer's watcher wraps JitSpec.build."""

    library = LIBRARY

    def _attach(self) -> None:
        module = sys.modules[LIBRARY]
        original = module.compile

        def monitored(name):
            out = original(name)
            self.monitor.count("fake_compiles", kernel=name)
            self.monitor.post_seal({"backend": "fake", "event": "JIT compile", "kernel": name})
            return out

        self._set(module, "compile", monitored, "fake.compile")


FAKE = Family(
    name="fake_jit", label="Fake JIT", root=lambda env: None, collect=lambda root, fp: ({}, []),
    place=lambda placing: Placed(),
    monitor=Monitored("fake", "fake", "Fake", "fake_compiles",
                      counters=(Counter("fake_compiles", per_kernel=True),), watcher=FakeWatcher))


@pytest.fixture
def with_fake(monkeypatch):
    """The one row: the fictitious family added to the table the real ones are in."""
    monkeypatch.setattr(registry, "FAMILIES", registry.FAMILIES + (FAKE,))
    module = ModuleType(LIBRARY)
    module.compile = lambda name: f"compiled {name}"
    monkeypatch.setitem(sys.modules, LIBRARY, module)
    return module


def test_a_new_monitored_family_is_watched_and_counted_from_its_row(with_fake):
    m = Monitor("warn").install()
    try:
        assert "fake.compile" in m.watching and with_fake.compile is not None
        m.begin_step("warm")
        assert with_fake.compile("k1") == "compiled k1"
        counts = m.end_step()
        assert counts.fake_compiles == 1 and counts.kernels == {"k1": 1}
        assert list(counts.as_dict())[-3:] == ["fake_compiles", "compile_ms", "kernels"]  # last of the counters
        m.seal()
        with_fake.compile("k2")
        assert [(e["backend"], e["kernel"]) for e in m.post_seal_events] == [("fake", "k2")]
        summary = m.summary()
        assert summary["before_seal"]["fake_compiles"] == 1 and summary["after_seal"]["fake_compiles"] == 1
    finally:
        m.uninstall()
    assert with_fake.compile("k3") == "compiled k3" and m.after_seal.fake_compiles == 1  # unwrapped


def test_a_new_family_s_counter_comes_after_the_others_and_its_compiles_can_raise(with_fake):
    assert jit_monitor.counter_names()[-1] == "fake_compiles"
    assert StepCounts().fake_compiles == 0 and StepCounts(fake_compiles=2).as_dict()["fake_compiles"] == 2
    m = Monitor("error").install()
    try:
        m.seal()
        with pytest.raises(JitAfterSealError, match="fake JIT compile after warmup was sealed: k9"):
            with_fake.compile("k9")
    finally:
        m.uninstall()


def test_without_its_row_the_monitor_knows_nothing_of_it(monkeypatch):
    monkeypatch.setitem(sys.modules, LIBRARY, ModuleType(LIBRARY))
    assert "fake_compiles" not in jit_monitor.counter_names()
    with pytest.raises(TypeError, match="fake_compiles"):
        StepCounts(fake_compiles=1)
    m = Monitor("warn").install()
    try:
        assert "fake.compile" not in m.watching
    finally:
        m.uninstall()


# --- what the table gives must be what the monitor gave before it (the report's bytes) -------------

def test_the_counters_keep_their_order_and_defaults():
    """The report writes the counts unsorted: the keys keep the order of the hard-coded list the
    table replaced, and DeepGEMM's loads stay None (cannot tell), not 0."""
    assert jit_monitor.counter_names() == ("jit_misses", "compiled", "disk_loads", "module_loads", "dynamo_compiles",
                                           "deep_gemm_jit", "deep_gemm_loads", "flashinfer_jit")
    assert list(StepCounts().as_dict()) == [*jit_monitor.counter_names(), "compile_ms", "kernels"]
    assert StepCounts().deep_gemm_loads is None and StepCounts().compiled == 0


def test_the_watchers_attach_in_the_order_they_did():
    """The report's `watching` lists what is hooked in attach order: Triton, torch.compile, DeepGEMM,
    FlashInfer, as the hard-coded list had them (the table lists DeepGEMM before torch.compile)."""
    assert [type(w).__name__ for w in Monitor("warn").watchers.values()] == [
        "TritonWatcher", "DynamoWatcher", "DeepGemmWatcher", "FlashInferWatcher"]
    assert [f.name for f in jit_monitor.families()] == ["triton", "torch_compile", "deep_gemm", "flashinfer_jit"]


def test_every_monitored_family_declares_its_watcher_and_its_counters():
    for family in registry.monitored():
        m = family.monitor
        names = [c.name for c in m.counters]
        assert issubclass(m.watcher, Watcher), family.name
        assert m.compiled in names and (m.loaded is None or m.loaded in names), family.name
    every = jit_monitor.counter_names()
    assert len(every) == len(set(every))  # no two families count into one counter


# --- the roots handed down (issue 56 item 1: resolved once per process) ----------------------------

def test_a_monitor_handed_an_environment_watches_deep_gemm_s_root_there(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "process"))
    monkeypatch.setitem(sys.modules, "deep_gemm", ModuleType("deep_gemm"))
    handed = Env.of({"DG_JIT_CACHE_DIR": str(tmp_path / "run")})
    m = Monitor("warn", env=handed).install()
    try:
        assert m.watchers["deep_gemm"].roots == [str(tmp_path / "run")]
    finally:
        m.uninstall()
    m = Monitor("warn").install()  # none handed: this process's, when DeepGEMM is first seen
    try:
        assert m.watchers["deep_gemm"].roots == [str(tmp_path / "process")]
    finally:
        m.uninstall()
