"""bench/flashinfer_build_time.py: each variant builds in a fresh workspace with its own nvcc flags (a stand-in
JitSpec records what FlashInfer would see)."""

from __future__ import annotations

import json
import time
import textwrap

from bench import flashinfer_build_time as fbt

STAND_IN = textwrap.dedent("""
    import os
    class Spec:
        build_dir = os.environ["FLASHINFER_WORKSPACE_BASE"]
        jit_library_path = os.path.join(build_dir, "m.so")
        def build(self, verbose):
            with open(self.jit_library_path, "w") as f:
                f.write(os.environ.get("FLASHINFER_EXTRA_CUDAFLAGS", "") + "|" + os.environ["FLASHINFER_CUDA_ARCH_LIST"])
            with open(os.path.join(self.build_dir, ".ninja_log"), "w") as f:  # ninja's own format
                f.write("# ninja log v6\\n0\\t98500\\t0\\t/w/csrc_sampling.cuda.o\\tab12\\n"
                        "10\\t20510\\t0\\t/w/csrc_renorm.cuda.o\\tcd34\\n98500\\t99000\\t0\\t/w/m.so\\tef56\\n")
    def gen():
        return Spec()
    def broken():
        raise RuntimeError("nvcc failed")
""")


def test_each_variant_builds_with_its_flags_in_its_own_workspace(tmp_path, monkeypatch, capsys):
    (tmp_path / "fake_fi_module.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FLASHINFER_EXTRA_CUDAFLAGS", "--from-the-caller")  # never leaks into a variant
    assert fbt.main(["--generator", "fake_fi_module:gen", "--arch", "9.0a"]) == 0
    out = json.loads(capsys.readouterr().out)
    sizes = [v["library_bytes"] for v in out["variants"]]
    assert [v["flags"] for v in out["variants"]] == ["", "--split-compile=0"]
    assert sizes == [len("|9.0a"), len("--split-compile=0|9.0a")]
    assert all(v["rc"] == 0 and v["wall_s"] >= 0 for v in out["variants"])
    assert out["variants"][0]["units_s"] == {"csrc_sampling.cuda.o": 98.5, "csrc_renorm.cuda.o": 20.5, "m.so": 0.5}


def test_a_failed_build_is_its_rc_and_last_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "fake_fi_module.py").write_text(STAND_IN)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert fbt.main(["--generator", "fake_fi_module:broken", "--flags", ""]) == 1
    variant = json.loads(capsys.readouterr().out)["variants"][0]
    assert variant["rc"] != 0 and "nvcc failed" in variant["error"][0] and variant["library_bytes"] is None


def test_a_variant_past_its_time_ends_with_everything_it_started(tmp_path, monkeypatch, capsys):
    """The child's whole process group ends at the timeout: a grandchild (nvcc) left running would load the
    machine under the next measurement."""
    marker = tmp_path / "grandchild.pid"
    (tmp_path / "slow_fi_module.py").write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        def gen():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            open({str(marker)!r}, "w").write(str(child.pid))
            time.sleep(60)
    """))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert fbt.main(["--generator", "slow_fi_module:gen", "--flags=", "--timeout", "3"]) == 1
    variant = json.loads(capsys.readouterr().out)["variants"][0]
    assert variant["rc"] is None and "not built within 3 s" in variant["error"][0]
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.1)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
