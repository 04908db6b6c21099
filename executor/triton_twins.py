"""Generic Triton twins compiled in processes of their own, for executor.triton_generic (issue 54).

A twin built ahead on one of GenericVariants' threads shares the worker's interpreter lock with the
warmup and with the other twins: Triton's front end and most of its passes hold it. On an H200 a 12B
model's cold start recorded its 24 twins late in the warmup, and closing them took 8.2-8.8 s after it,
waiting for those builds (bench/RESULTS.md part AL). Here a twin is compiled by a helper process (a
fresh interpreter, ``python -m executor.triton_twins``) for the GPU's target through the offline
driver (no CUDA context), into Triton's disk cache, which the worker shares (the same environment):
the worker's own build of that twin at close is then a load from disk.

A twin goes to a process only where the child finds its kernel by name (``address``: the module
attribute its qualified name leads to is that kernel); any other twin, and any a process fails, is
built on a thread or at close as before, so a failure here costs time, never a kernel. Requests and
answers are pickled frames over the children's own pipes (this process's children: nothing else
writes them). A child ends when its stdin closes (``close``, or the worker's death). Off by default
(the vLLM plugin's WARMUP_GENERIC_TWIN_PROCESSES): its seconds are to be measured on a GPU first.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future

from .triton_generic import compile_twin

FRAME = struct.Struct(">I")  # a frame's length, then its pickle
_STOP = object()


def address(fn) -> tuple[str, str] | None:
    """(module, qualified name) by which a fresh process finds this JITFunction; None where the name
    leads elsewhere or nowhere (a kernel made in a function, or one its module rebinds)."""
    inner = getattr(fn, "fn", None)
    module, qualname = getattr(inner, "__module__", None), getattr(inner, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found = resolve(module, qualname)
    except Exception:  # noqa: BLE001 - not found by name: a thread builds it
        return None
    return (module, qualname) if found is fn else None


def resolve(module: str, qualname: str):
    """The JITFunction a module's attribute path leads to, through the wrappers Triton's decorators
    put around it (an Autotuner's or Heuristics' ``fn``)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    while not hasattr(found, "device_caches") and hasattr(found, "fn"):
        found = found.fn
    return found


def write_frame(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(FRAME.pack(len(data)) + data)
    stream.flush()


def read_frame(stream):
    """The next frame's value; None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # noqa: S301 - this process's own parent or child wrote it


class TwinProcesses:
    """`workers` helper processes that compile twins for `capability` (90 for SM 9.0)."""

    def __init__(self, workers: int, capability: int, preload=()):
        self.workers, self.capability, self.preload = max(1, int(workers)), int(capability), tuple(preload)
        self._requests: queue.Queue = queue.Queue()
        self._children: list[subprocess.Popen] = []
        self._threads: list[threading.Thread] = []
        self._live = 0  # children still answering
        self._lock = threading.Lock()
        self.failed_to_start: str | None = None

    def start(self) -> bool:
        """Start the children (their imports run beside the worker's start); False where none would."""
        command = [sys.executable, "-m", __name__, "--capability", str(self.capability), *self.preload]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_package_root(),
                                                                          os.environ.get("PYTHONPATH")]))}
        try:
            for _ in range(self.workers):
                self._children.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       env=env, close_fds=True))
        except OSError as e:
            self.failed_to_start = f"{type(e).__name__}: {e}"
            self.close()
            return False
        self._live = len(self._children)
        for child in self._children:
            thread = threading.Thread(target=self._serve, args=(child,), name="warmup-twin-pipe", daemon=True)
            thread.start()
            self._threads.append(thread)
        return True

    def submit(self, fn, entries, options: dict) -> Future | None:
        """The twin of `fn` for these binder entries and options, compiled by a child: a Future that
        holds None once it is in Triton's disk cache (or the child's error). None where no child can
        find the kernel, or none runs: the caller builds it its own way."""
        where = address(fn)
        with self._lock:
            if where is None or self._live <= 0:
                return None
            future: Future = Future()
            self._requests.put((where, tuple(entries), dict(options), future))
        return future

    def close(self) -> None:
        """No more twins: every child ends (its stdin closed; killed if it does not end)."""
        for _ in self._threads:
            self._requests.put(_STOP)
        for child in self._children:
            try:
                child.stdin.close()
            except OSError:
                pass
        for child in self._children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
        self._children, self._threads = [], []
        with self._lock:
            self._live = 0
        self._fail_queued("the twin processes were closed")

    def _fail_queued(self, why: str) -> None:
        """What no child took: the caller builds those."""
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and not item[3].done():
                item[3].set_exception(RuntimeError(why))

    def _serve(self, child: subprocess.Popen) -> None:
        """One child's pipe: its requests one at a time, each answered before the next."""
        while True:
            item = self._requests.get()
            if item is _STOP:
                return
            (module, qualname), entries, options, future = item
            try:
                write_frame(child.stdin, (module, qualname, entries, options))
                answer = read_frame(child.stdout) or ("error", "the child ended")
            except (OSError, ValueError, pickle.PickleError) as e:
                answer = ("error", f"{type(e).__name__}: {e}")
            if answer[0] == "ok":
                future.set_result(None)
            else:
                future.set_exception(RuntimeError(answer[1]))
            if answer[0] != "ok" and child.poll() is not None:  # ended: the requests left go to the others
                self._child_ended()
                return

    def _child_ended(self) -> None:
        """One child fewer; with none left, every request still queued fails now (the caller builds those
        twins at close) instead of waiting for a child that will never take it."""
        with self._lock:
            self._live -= 1
            last = self._live <= 0
        if last:
            self._fail_queued("no twin process is left")


def _package_root() -> str:
    """The directory this package is imported from: the children run the same code."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- the child ---------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    # The answers get a descriptor of their own, and descriptor 1 becomes the log's: whatever writes to
    # standard output (print, a logger's handler made at an import, Triton) can never land in a frame.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from .kernels.jit.stand_in import use_offline_driver

    use_offline_driver(args.capability)  # Triton compiles for the worker's GPU, and asks CUDA nothing
    for name in args.preload:  # the kernels' packages, imported before the first twin asks for them
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a twin of it then fails, and the worker builds it
            pass
    requests = sys.stdin.buffer
    while True:
        request = read_frame(requests)
        if request is None:
            return 0
        write_frame(answers, _compile(*request))


def _compile(module: str, qualname: str, entries, options: dict) -> tuple[str, str | None]:
    """("ok", None) once the twin is in Triton's disk cache; else ("error", why, in one line)."""
    try:
        from triton.runtime.jit import JITFunction

        compile_twin(resolve(module, qualname), 0, entries, options, JITFunction._pack_args,
                     JITFunction._do_compile, launcher=True)
        return "ok", None
    except BaseException as e:  # noqa: BLE001 - the answer says it; the worker builds that twin itself
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {__name__}")
    p.add_argument("--capability", type=int, required=True, help="the GPU's compute capability (90 for SM 9.0)")
    p.add_argument("preload", nargs="*", help="modules imported first (the kernels' packages)")
    return p


if __name__ == "__main__":
    sys.exit(main())
