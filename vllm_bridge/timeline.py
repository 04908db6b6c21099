"""One start's timeline, process by process (issue 54 item 1): where a `vllm serve` start spends its time.

vLLM calls the plugin's ``register`` in each of its processes: the API server (while it parses its
arguments), the engine core (EngineCore.__init__, a spawned process importing torch and vLLM
again) and, with tensor parallelism, each worker. Each of them keeps its own marks: its process
start (from /proc: what the interpreter and the imports cost before vLLM loads its plugins), the
plugin's register, vLLM's EngineArgs.create_engine_config (arguments and model resolution, in the
API server), the worker's three methods the plugin wraps and vLLM's phases inside them
(vllm_bridge.warmup.phases: weights, profile run, warmup around the plan), each plan stage, the generic
Triton variants, the bundle's pin, pull and install, and ready. Each mark says whose work it is:
``plugin`` (the plugin's own) or ``vllm`` (vLLM's, the plugin's marks nested inside it are its share).

The file, ``timeline.<role>.<pid>.json``, goes to WARMUP_TIMELINE (a directory), else beside the
plan report (WARMUP_PLAN_REPORT's directory); with neither, nothing is kept. It is written again
after each mark (a few kB, atomically: a process vLLM kills at shutdown leaves its last complete
file), so its cost is a timestamp and a small write. Writing it is never allowed to stop vLLM: a
file that cannot be written is one warning line (beside a report that cannot be written either:
the report's own line, vllm_bridge.step_aside), and this process records nothing more.
bench/startup_timeline.py merges one start's files and puts two starts side by side.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import threading
import time

from . import patches
from .step_aside import cause_of

log = logging.getLogger("vllm.warmup_planner")

FORMAT = "warmup-timeline/1"
START = "WARMUP_PLANNER_TIMELINE_START"  # set by the plugin, not the user: one id for the processes of a start
PATCHED = "_warmup_planner_timeline"    # on EngineArgs: vLLM's create_engine_config
PLUGIN, VLLM = "plugin", "vllm"
_RECORDERS: dict = {}                    # pid -> Recorder: a process forked after register starts its own
_LOCK = threading.Lock()


def _fresh_lock_in_child() -> None:
    """A process forked while another thread held the lock (the engine core forked from the API
    server: vllm_bridge.engine_core_start) would wait for it forever: the child gets its own."""
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


# --- where the process started ---------------------------------------------------------------------------

def process_start_time(proc: str = "/proc", pid: str = "self") -> float | None:
    """When this process started (time.time()'s clock), from its start time in clock ticks since
    boot (/proc/PID/stat, field 22) and the seconds since boot (/proc/uptime, to 10 ms; /proc/stat's
    btime is whole seconds); None where /proc cannot tell."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii") as f:
            stat = f.read()
        with open(os.path.join(proc, "uptime"), encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        now = time.time()
        # the command name (field 2) may hold spaces and parentheses: the fields after its last ')'
        started_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        return round(now - uptime + started_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


def role_of(process_name: str, first: bool) -> tuple[str, int | None]:
    """(role, rank) from the name vLLM gives the process it starts (multiprocessing's: "EngineCore",
    "EngineCore_DP1", "VllmWorker-3"); vLLM's first process (`first`: no process of this start
    before it) is the API server of `vllm serve`, or an offline LLM's process."""
    if process_name.startswith("VllmWorker-") and process_name[len("VllmWorker-"):].isdigit():
        rank = int(process_name[len("VllmWorker-"):])
        return f"worker_rank{rank}", rank
    if process_name.startswith("EngineCore"):
        suffix = process_name[len("EngineCore"):].lstrip("_").lower()
        return "engine_core" + (f"_{suffix}" if suffix else ""), None
    return ("api_server" if first else "process"), None


def directory_of(settings) -> str | None:
    """WARMUP_TIMELINE, else the plan report's directory; None: no timeline."""
    if settings.timeline:
        return settings.timeline
    if settings.report:
        return os.path.dirname(os.path.abspath(settings.report))
    return None


# --- one process's marks ---------------------------------------------------------------------------------

class Recorder:
    """This process's marks, written to DIRECTORY/timeline.<role>.<pid>.json after each one."""

    def __init__(self, directory: str, role: str, rank: int | None, start_id: str, pid: int | None = None,
                 proc: str = "/proc", beside_report: bool = False):
        self.directory, self.role, self.rank, self.start_id = directory, role, rank, start_id
        self.beside_report = beside_report  # a failure is the report's too: its own line says it
        self.pid = pid or os.getpid()
        self.process_start = process_start_time(proc)
        self.marks: list[dict] = []
        self.failed: str | None = None  # why the file could not be written: nothing more is recorded
        self.lock = threading.Lock()

    @property
    def path(self) -> str:
        return os.path.join(self.directory, f"timeline.{self.role}.{self.pid}.json")

    def mark(self, phase: str, start: float, end: float | None = None, owner: str = VLLM,
             background: bool = False, **detail) -> None:
        """One phase [start, end] (an instant where end is None); `background`: it ran beside vLLM,
        off its critical path (a thread, another process)."""
        if self.failed:
            return
        row = {"phase": phase, "owner": owner, "start": round(start, 4), "end": round(end if end is not None
                                                                                     else start, 4)}
        if background:
            row["background"] = True
        row.update(detail)
        with self.lock:
            self.marks.append(row)
            self.write()

    def document(self) -> dict:
        return {"format": FORMAT, "start_id": self.start_id, "role": self.role, "rank": self.rank,
                "pid": self.pid, "ppid": os.getppid(), "process_name": multiprocessing.current_process().name,
                "process_start": self.process_start,
                "process_start_source": "/proc" if self.process_start is not None else "first mark",
                "marks": list(self.marks)}

    def write(self) -> None:
        """The whole file again, renamed into place (a reader never sees half of it); a failure is
        one warning line, and this process records nothing more."""
        tmp = f"{self.path}.tmp"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.document(), f, indent=1)
            os.replace(tmp, self.path)
        except Exception as e:  # noqa: BLE001 - a measurement: vLLM starts either way
            self.failed = cause_of(e)
            log.log(logging.DEBUG if self.beside_report else logging.WARNING,
                    "warmup-planner: the start-up timeline is not written: %s", self.failed)


def begin(settings, environ=os.environ, proc: str = "/proc") -> Recorder | None:
    """At register: this process's recorder, with its first marks (process start to the plugin's
    load, vLLM's); None where no directory is set. The first process of a start names the start
    for the processes it starts (they inherit the environment)."""
    directory = directory_of(settings)
    if directory is None:
        return None
    first = START not in environ
    if first:
        environ[START] = f"{os.getpid()}-{time.time_ns()}"
    role, rank = role_of(multiprocessing.current_process().name, first)
    recorder = Recorder(directory, role, rank, environ[START], proc=proc, beside_report=not settings.timeline)
    with _LOCK:
        _RECORDERS[recorder.pid] = recorder
    now = time.time()
    recorder.mark("process start to plugin load", recorder.process_start if recorder.process_start else now, now,
                  what="interpreter, imports, vLLM up to its plugin load")
    return recorder


def current() -> Recorder | None:
    """This process's recorder; in a process forked after register (vLLM loads plugins once, so
    register does not run there), a new one, as a parent's marks are not this process's."""
    pid = os.getpid()
    recorder = _RECORDERS.get(pid)
    if recorder is not None or not _RECORDERS:
        return recorder
    with _LOCK:
        parent = next(iter(_RECORDERS.values()))
        name = multiprocessing.current_process().name
        role, rank = role_of(name, False)
        _RECORDERS[pid] = recorder = Recorder(parent.directory, role, rank, parent.start_id,
                                              beside_report=parent.beside_report)
    return recorder


def reset() -> None:
    """No recorder in this process (tests)."""
    _RECORDERS.clear()


def mark(phase: str, start: float, end: float | None = None, owner: str = VLLM, background: bool = False,
         **detail) -> None:
    """A mark in this process's timeline; nothing without one. Never raises: a measurement."""
    try:
        recorder = current()
        if recorder is not None:
            recorder.mark(phase, start, end, owner, background, **detail)
    except Exception as e:  # noqa: BLE001 - a measurement: vLLM starts either way
        log.warning("warmup-planner: the start-up timeline is not written: %s", cause_of(e))
        reset()


@contextlib.contextmanager
def span(phase: str, owner: str = VLLM, background: bool = False, **detail):
    """The body as one mark (also when it raises: the time was spent)."""
    start = time.time()
    try:
        yield
    finally:
        mark(phase, start, time.time(), owner, background, **detail)


def set_rank(rank: int) -> None:
    """The worker's rank, where the process holds one (the engine core runs rank 0's worker itself)."""
    recorder = current()
    if recorder is not None:
        recorder.rank = rank


# --- vLLM's arguments and model resolution, in the API server -------------------------------------------

def watch_engine_args() -> bool:
    """Time vLLM's EngineArgs.create_engine_config where this process has imported it (the API
    server, whose argument parsing loaded the plugin); never imported only for this. True if wrapped."""
    engine_args = patches.imported("vllm.engine.arg_utils", "EngineArgs")
    if engine_args is None:
        return False

    def timed(original):
        def create_engine_config(self, *args, **kwargs):
            with span("engine config (arguments, model resolution)"):
                return original(self, *args, **kwargs)
        return create_engine_config

    patches.wrap_once(engine_args, "create_engine_config", PATCHED, timed)
    return True


def unwatch_engine_args() -> None:
    """vLLM's own create_engine_config back (tests)."""
    engine_args = patches.imported("vllm.engine.arg_utils", "EngineArgs")
    if engine_args is not None:
        patches.unwrap(engine_args, "create_engine_config", PATCHED)
