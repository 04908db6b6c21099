"""executor.triton_twins without a GPU or a compile: which kernels a fresh process finds by name,
the frames of its pipes, and what close() leaves to the caller. The twins compiled for real in a
child are tests/executor/test_triton_generic.py's (ahead_in_processes)."""

from __future__ import annotations

import io
import sys
import types
from concurrent.futures import Future

import pytest

from executor import triton_twins
from executor.triton_twins import TwinProcesses, address, read_frame, resolve, write_frame


class Kernel:
    """A JITFunction as address() reads it: the Python function it wraps (``fn``) and its caches."""

    def __init__(self, function):
        self.fn, self.device_caches = function, {}


class Autotuned:
    """A decorator's wrapper (triton.autotune's Autotuner): the kernel under its ``fn``."""

    def __init__(self, kernel):
        self.fn = kernel


@pytest.fixture
def kernels_module(monkeypatch):
    module = types.ModuleType("fake_kernels")

    def scale():
        pass

    def tuned():
        pass

    scale.__module__ = tuned.__module__ = "fake_kernels"
    scale.__qualname__, tuned.__qualname__ = "scale", "tuned"
    module.scale, module.tuned = Kernel(scale), Autotuned(Kernel(tuned))
    monkeypatch.setitem(sys.modules, "fake_kernels", module)
    return module


def test_a_module_level_kernel_is_found_by_name_through_its_wrappers(kernels_module):
    assert address(kernels_module.scale) == ("fake_kernels", "scale")
    assert address(kernels_module.tuned.fn) == ("fake_kernels", "tuned")
    assert resolve("fake_kernels", "tuned") is kernels_module.tuned.fn


def test_a_kernel_the_name_does_not_lead_to_goes_to_a_thread(kernels_module):
    def local():
        pass

    local.__module__, local.__qualname__ = "fake_kernels", "make.<locals>.local"
    assert address(Kernel(local)) is None                      # made in a function
    rebound = Kernel(kernels_module.scale.fn)
    assert address(rebound) is None                            # the module's name leads to another object
    main = Kernel(kernels_module.scale.fn.__class__)
    main.fn = types.SimpleNamespace(__module__="__main__", __qualname__="scale")
    assert address(main) is None                               # a script's kernel: a child has another __main__
    gone = Kernel(types.SimpleNamespace(__module__="no_such_module_here", __qualname__="k"))
    assert address(gone) is None


def test_frames_round_trip_and_end_at_the_streams_end():
    stream = io.BytesIO()
    write_frame(stream, ("fake_kernels", "scale", (("*fp32", ""), ("constexpr", 64)), {"num_warps": 4}))
    write_frame(stream, ("ok", None))
    stream.seek(0)
    assert read_frame(stream) == ("fake_kernels", "scale", (("*fp32", ""), ("constexpr", 64)), {"num_warps": 4})
    assert read_frame(stream) == ("ok", None)
    assert read_frame(stream) is None
    stream = io.BytesIO(b"\x00\x00\x01\x00abc")                 # a frame cut short: the child ended
    assert read_frame(stream) is None


def test_no_child_no_twin_in_a_process(kernels_module):
    twins = TwinProcesses(2, 90)
    assert twins.submit(kernels_module.scale, (), {}) is None    # not started: the caller's threads build it


def test_close_fails_what_no_child_took(kernels_module):
    twins = TwinProcesses(1, 90)
    twins._threads, twins._live = [object()], 1                  # as if started, with no child to take requests
    future = twins.submit(kernels_module.scale, (("i32", ""),), {})
    assert isinstance(future, Future) and not future.done()
    twins.close()
    with pytest.raises(RuntimeError, match="closed"):
        future.result(timeout=1)


def test_a_child_that_cannot_start_is_said_and_nothing_runs(monkeypatch):
    def no_spawn(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(triton_twins.subprocess, "Popen", no_spawn)
    twins = TwinProcesses(3, 90)
    assert twins.start() is False
    assert twins.failed_to_start == "OSError: [Errno 24] Too many open files" and twins._threads == []


def test_a_child_answers_a_request_it_cannot_do_in_one_line(tmp_path):
    """The child's loop, in this process: a kernel it cannot find is an error answer, not an exception."""
    assert triton_twins._compile("no_such_module_here", "k", (), {})[0] == "error"
    assert "ModuleNotFoundError" in triton_twins._compile("no_such_module_here", "k", (), {})[1]


def test_what_a_child_prints_never_lands_in_a_frame(tmp_path):
    """A module the child imports first may print (vLLM's logger writes to standard output): the frames
    have a descriptor of their own. A real child, asked for a kernel it cannot find: one error frame."""
    import os
    import subprocess

    (tmp_path / "noisy.py").write_text("print('a line on standard output at import')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), triton_twins._package_root()])}
    child = subprocess.Popen([sys.executable, "-m", "executor.triton_twins", "--capability", "90", "noisy"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    write_frame(child.stdin, ("no_such_module_here", "k", (), {}))
    answer = read_frame(child.stdout)
    child.stdin.close()
    assert child.wait(timeout=60) == 0
    assert answer[0] == "error" and "ModuleNotFoundError" in answer[1]
    assert b"a line on standard output at import" in child.stderr.read()


def test_when_the_last_child_ends_the_queued_twins_fail_at_once(kernels_module):
    """Not TWIN_WAIT_S at close for requests no child will take: they fail, and close builds them."""
    twins = TwinProcesses(2, 90)
    twins._threads, twins._live = [object(), object()], 2
    queued = [twins.submit(kernels_module.scale, (("i32", str(i)),), {}) for i in range(3)]
    twins._child_ended()
    assert not any(f.done() for f in queued)                     # one child is still there to take them
    twins._child_ended()
    assert all(isinstance(f.exception(timeout=1), RuntimeError) for f in queued)
    assert twins.submit(kernels_module.scale, (), {}) is None    # none left: the caller's threads build it
