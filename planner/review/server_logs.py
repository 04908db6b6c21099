"""Compiles after ready, read from what a serving process logged (issue 38, `warmup absorb`).

Two kinds of log, told apart by their first line:

* vLLM's server log (`vllm serve` output, as vLLM writes it or with a harness's
  "SECONDS out|err " prefix per line). vLLM's JIT monitor (vllm/utils/jit_monitor.py, from
  0.25.0), activated per process once warmup is done ("Kernel JIT monitor activated; ...
  mode=warn."), writes one line per compile it sees after that: "<Backend> <event> during
  inference: <kernel>[ (<detail>)]. This causes a latency spike; ..." for the families
  Triton ("kernel JIT compilation", @triton.jit first compiles), CuTeDSL ("JIT compilation",
  cute.compile) and, from 0.33, TileLang. In mode warn each message is logged once per process
  (logger.warning_once), so a kernel's later variants are not seen unless
  --jit-monitor-verbose; in mode error the same text is a RuntimeError, which may be logged
  more than once (every copy in one process counts once here). The detail, with
  --jit-monitor-verbose only, holds the specialization ("...; key=...", TileLang
  "cache_key=...; runtime_shapes=..."). The monitor also turns on Triton's autotuning print
  ("Triton autotuning for function NAME,\\nwith key as KEY,\\n..."), family "Triton autotune".
  The plugin's own monitor (executor/jit_monitor.py) warns "... after warmup was sealed: ..."
  into the same log; those lines are read only when no plugin JIT log is given with it.
* The plugin's JIT log (WARMUP_JIT_LOG, one JSON object a line, written by
  executor/jit_monitor.py's Monitor._record): "time" (epoch seconds), "step", "backend"
  (triton, deep_gemm, flashinfer, torch.compile), "event", "kernel", and per backend the
  key: Triton "key" (with "constants"), DeepGEMM "cache_entry" (and "shape", "m" from the
  verify steps), every line an event after the plugin sealed its warmup.

Bad input is a PlanError naming the file and line (exit 2): a missing or unreadable file,
binary data, a JSON line that does not parse (a line cut short included), a monitor line cut
off before its kernel is named, a log that another vLLM release wrote than the one the plan
mirrors, and a file that is neither log: empty, or without one line of vLLM's logger (VLLM_LINE),
which every server log has by the thousand, so that a CI job pointed at the wrong file fails
rather than passing on "nothing compiled". Other lines (other processes, progress bars,
requests) are noise and skipped.

A log is read a line at a time, whatever its size (a day of serving is hundreds of MB): memory
holds one line, at most MAX_LINE_BYTES of it, and the compiles found.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import NamedTuple

from ..engine.releases import parse_release
from ..errors import PlanError, one_line
from ..yamlio import open_input

# What is read of a line; the rest of a longer one (a tensor's repr in a traceback, a file with no
# newline at all) is skipped: no line the reader looks for is that long.
MAX_LINE_BYTES = 1 << 20
EXPECTED = "a vLLM server log or a WARMUP_JIT_LOG file"

# The families, as the logs name them: vLLM's monitor's backends, and the plugin's.
PLUGIN_BACKENDS = {"triton": "Triton", "deep_gemm": "DeepGEMM", "flashinfer": "FlashInfer",
                   "torch.compile": "torch.compile"}

# A harness's per-line prefix (bench/vllm_serve_trace.py: seconds since start, the stream).
HARNESS = re.compile(r"^\s*(?P<t>\d+(?:\.\d+)?) (?:out|err) ")
# vLLM's multiprocess prefix ("(EngineCore pid=3142) ", "(Worker_TP1 pid=...) ").
PROCESS = re.compile(r"\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\) ")
# vLLM's logger: "WARNING 11-27 03:46:47 [jit_monitor.py:129] ".
STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)")
# A line of vLLM's logger (vllm/logger.py's _FORMAT, 0.25 and 0.33: "%(levelname)s %(asctime)s
# [%(fileinfo)s:%(lineno)d] %(message)s", asctime "%m-%d %H:%M:%S"), after whatever stands before it
# (VLLM_LOGGING_PREFIX, 0.33's "(EngineCore_DP0 pid=N) ", a harness's prefix), in color or not
# (ColoredFormatter wraps the level, the time and the [file:line] in ANSI codes).
_COLOR = rb"\x1b\[[0-9;]*m"
_COLORS = rb"(?:" + _COLOR + rb")*"
VLLM_LINE = re.compile(rb"(?:" + _COLOR + rb"|\b)(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)" + _COLORS + rb" " + _COLORS
                       + rb"\d\d-\d\d \d\d:\d\d:\d\d" + _COLORS + rb" " + _COLORS + rb"\[[^\]\s]+:\d+\]")
ANSI = re.compile(_COLOR.decode())
MONITOR = re.compile(r"\b(?P<family>Triton|CuTeDSL|TileLang) (?:kernel )?JIT compilation during inference: "
                     r"(?P<rest>.*)$")
MONITOR_TAIL = ". This causes a latency spike"
ACTIVATED = re.compile(r"Kernel JIT monitor activated;.*?mode=(?P<mode>\w+)")
AUTOTUNE = re.compile(r"Triton autotuning for function (?P<fn>[\w.]+)")
AUTOTUNE_KEY = re.compile(r"^with key as (?P<key>.*?),?\s*$")
PLUGIN_LINE = re.compile(r"\b(?P<backend>triton|deep_gemm|flashinfer|torch\.compile) (?P<event>[^:]+?) after "
                         r"warmup was sealed: (?P<kernel>\S+?)(?: (?P<repr>.*?))?\. This is a latency spike")
VERSION = (re.compile(r"LLM engine \(v(?P<v>\d+\.\d+\.\d+[\w.+-]*)\)"),
           re.compile(r"vLLM API server version (?P<v>\d+\.\d+\.\d+[\w.+-]*)"))
# Cheap first look: only lines holding one of these are matched further.
NEEDLES = re.compile(rb"during inference: |Kernel JIT monitor activated|Triton autotuning for function|"
                     rb"after warmup was sealed|LLM engine \(v|API server version")


class Compile(NamedTuple):
    """One compile after ready, as a log recorded it."""

    family: str              # Triton, CuTeDSL, TileLang, Triton autotune, DeepGEMM, FlashInfer, torch.compile
    kernel: str              # the kernel (Triton, CuTeDSL, TileLang), module (FlashInfer), cache entry's name
    key: str | None          # its specialization, where the log has it
    when: str | None         # as the log says it: vLLM's "11-27 03:46:47", or UTC from the plugin's epoch
    after_ready_s: float | None  # seconds after its process's monitor activated (vLLM's log)
    file: str
    line: int
    source: str              # "vllm" (vLLM's monitor), "plugin" (WARMUP_JIT_LOG or its log lines)
    event: str               # what the monitor saw ("kernel JIT compilation", "JIT module build", ...)
    process: str | None      # "EngineCore pid=3142" where vLLM's prefix names it
    constants: tuple = ()    # (name, value) of the specialization's constexprs, where the log has them

    def identity(self) -> tuple:
        """What makes two records one compile (mode error logs its error more than once)."""
        return (self.file, self.process, self.family, self.kernel, self.key, self.event, self.constants)


class LogFile(NamedTuple):
    """What one log file said."""

    path: str
    kind: str                     # "vllm server log" or "plugin JIT log"
    vllm_version: str | None      # the vLLM that wrote it, where it says
    version_line: int | None
    monitor_modes: tuple          # the modes vLLM's monitor was activated with (per process)
    compiles: tuple               # Compile, in log order, each once


def read_logs(paths: list, vllm_release: str | None = None) -> list:
    """Every log read (LogFile each, in the order given); `vllm_release`: the release the plan
    mirrors, and a log another release wrote is refused at its version line."""
    files = [read_log(path) for path in paths]
    for log in files:
        if vllm_release and log.vllm_version and parse_release(log.vllm_version) != parse_release(vllm_release):
            raise PlanError(f"vLLM {log.vllm_version} wrote this log, and the plan mirrors vLLM {vllm_release}: "
                            "absorb it with the plan of that release (`warmup --version` lists them)",
                            file=log.path, line=log.version_line)
    with_plugin_log = any(log.kind == "plugin JIT log" for log in files)
    if with_plugin_log:  # the JSON lines have the key: the same events' warning lines are left out
        files = [log._replace(compiles=tuple(c for c in log.compiles if c.source != "plugin"))
                 if log.kind == "vllm server log" else log for log in files]
    return files


def read_log(path: str) -> LogFile:
    """One log, told apart by its first line that is not blank: a JSON object starts the plugin's
    JIT log, anything else a server log."""
    with open_input(path, EXPECTED) as f:
        if f.peek(2)[:2] == b"\x1f\x8b":
            raise PlanError("gzip-compressed: decompress it first (zcat FILE > FILE.log)", file=path)
        lines = _lines(path, f)
        first = next(((number, text) for number, text in lines if text.strip()), None)
        if first is None:
            raise PlanError(f"empty (no line but blank ones), expected {EXPECTED}", file=path)
        lines = itertools.chain([first], lines)  # blank lines before it are nothing to either reader
        if first[1].lstrip().startswith(b"{"):
            return _plugin_log(path, lines)
        return _server_log(path, lines)


def _lines(path: str, f) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline) of every line of the open file `f`, read a line at
    a time, each cut at MAX_LINE_BYTES; binary data is refused at its line."""
    number = 0
    while line := f.readline(MAX_LINE_BYTES):
        number += 1
        if b"\0" in line:  # before skipping the rest: /dev/zero has no end
            raise PlanError(f"binary data (NUL byte), expected {EXPECTED}", file=path, line=number)
        if not line.endswith(b"\n") and len(line) == MAX_LINE_BYTES:
            _skip_rest_of_line(f)
        yield number, line.rstrip(b"\n")


def _skip_rest_of_line(f) -> None:
    """Read past the rest of an over-long line, a buffer at a time (a file with no newline is
    never held whole)."""
    while (rest := f.readline(io.DEFAULT_BUFFER_SIZE)) and not rest.endswith(b"\n"):
        pass


def _decode(path: str, number: int, text: bytes) -> str:
    """A line as text, without the color codes of a log written to a terminal (ColoredFormatter)."""
    try:
        line = text.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as e:
        raise PlanError(f"not UTF-8 text (byte {e.start})", file=path, line=number) from None
    return ANSI.sub("", line) if "\x1b" in line else line


# --- vLLM's server log -------------------------------------------------------------------------------

class _Reader:
    """State while reading one server log: each process's activation, the pending autotune."""

    def __init__(self, path: str):
        self.path = path
        self.vllm_lines = False       # a line of vLLM's logger seen: this is a vLLM server's log
        self.version: str | None = None
        self.version_line: int | None = None
        self.activated: dict = {}     # process -> stamp of its activation line (None: no stamp)
        self.modes: list = []
        self.compiles: list = []
        self.seen: set = set()
        self.autotune: Compile | None = None  # waiting for its "with key as" line

    def add(self, compile_: Compile) -> None:
        if compile_.identity() not in self.seen:
            self.seen.add(compile_.identity())
            self.compiles.append(compile_)


def _server_log(path: str, raw_lines: Iterable) -> LogFile:
    reader = _Reader(path)
    for number, raw in raw_lines:
        if not reader.vllm_lines:
            reader.vllm_lines = VLLM_LINE.search(raw) is not None
        if reader.autotune is not None:
            _autotune_key(reader, _decode(path, number, raw))
        if NEEDLES.search(raw):
            _server_line(reader, number, _decode(path, number, raw))
    if not reader.vllm_lines:
        raise PlanError("no line of vLLM's logger (\"LEVEL MM-DD HH:MM:SS [FILE:LINE] MESSAGE\") and no JSON line "
                        f"of the plugin's: expected {EXPECTED}", file=path)
    if reader.autotune is not None:
        reader.add(reader.autotune)
    return LogFile(path, "vllm server log", reader.version, reader.version_line, tuple(reader.modes),
                   tuple(reader.compiles))


def _server_line(reader: _Reader, number: int, text: str) -> None:
    harness = HARNESS.match(text)
    body = text[harness.end():] if harness else text
    proc = PROCESS.match(body)
    process = f"{proc['proc']} pid={proc['pid']}" if proc else None
    stamp = STAMP.search(body)
    when = f"{stamp['md']} {stamp['hms']}" if stamp else None
    clock = float(harness["t"]) if harness else (_seconds(stamp) if stamp else None)
    if reader.version is None:
        for pattern in VERSION:
            if found := pattern.search(body):
                reader.version, reader.version_line = found["v"], number
                break
    if found := ACTIVATED.search(body):
        reader.activated.setdefault(process, clock)
        reader.modes.append(found["mode"])
        return
    after = _after(reader, process, clock)
    if found := MONITOR.search(body):
        kernel, key, constants = _monitor_rest(reader.path, number, found["rest"])
        reader.add(Compile(found["family"], kernel, key, when, after, reader.path, number, "vllm",
                           "JIT compilation", process, constants))
    elif found := AUTOTUNE.search(body):
        if process in reader.activated:  # the monitor turned the print on: before it, tuning is warmup
            reader.autotune = Compile("Triton autotune", found["fn"], None, when, after, reader.path, number,
                                      "vllm", "autotuning", process)
    elif found := PLUGIN_LINE.search(body):
        reader.add(Compile(PLUGIN_BACKENDS[found["backend"]], found["kernel"], found["repr"], when, after,
                           reader.path, number, "plugin", found["event"], process))


def _autotune_key(reader: _Reader, text: str) -> None:
    """The line after "Triton autotuning for function NAME," is "with key as KEY," (Triton prints
    the message over four lines, vLLM prefixes each)."""
    harness = HARNESS.match(text)
    body = text[harness.end():] if harness else text
    proc = PROCESS.match(body)
    body = body[proc.end():] if proc else body
    found = AUTOTUNE_KEY.match(body)
    pending, reader.autotune = reader.autotune, None
    reader.add(pending._replace(key=found["key"]) if found else pending)


def _monitor_rest(path: str, number: int, rest: str) -> tuple:
    """'<kernel>[ (<detail>)]. This causes ...' -> (kernel, key, constants); a line cut off before
    the tail is refused: its kernel name may be cut too."""
    end = rest.rfind(MONITOR_TAIL)
    if end < 0:
        raise PlanError("vLLM's JIT-monitor line is cut off (no \"This causes a latency spike\" after the kernel): "
                        "take the whole line from the server's log", file=path, line=number)
    named = rest[:end]
    kernel, _, detail = named.partition(" (")
    if not kernel:
        raise PlanError("vLLM's JIT-monitor line names no kernel", file=path, line=number)
    detail = detail[:-1] if detail.endswith(")") else detail
    return kernel, _detail_key(detail) if detail else None, _constexprs(detail)


def _detail_key(detail: str) -> str:
    """The specialization in --jit-monitor-verbose's detail: Triton's 'key=...' (its last field),
    TileLang's 'cache_key=...'; else the whole detail."""
    for marker in ("; key=", "cache_key="):
        at = detail.find(marker)
        if at >= 0:
            value = detail[at + len(marker):]
            return value.split("; runtime_shapes=")[0] if marker == "cache_key=" else value
    return detail


def _constexprs(detail: str) -> tuple:
    """'constexprs={BLOCK=8192, TOPK=True}; ...' -> (('BLOCK', '8192'), ('TOPK', 'True'))."""
    found = re.match(r"constexprs=\{(?P<items>[^}]*)\}", detail)
    if not found or not found["items"]:
        return ()
    pairs = (item.partition("=") for item in found["items"].split(", "))
    return tuple((name.strip(), value.strip()) for name, sep, value in pairs if sep)


def _seconds(stamp) -> float:
    """vLLM's 'MM-DD HH:MM:SS' as seconds into a (leap) year: differences within one log only."""
    moment = datetime.strptime(f"2024-{stamp['md']} {stamp['hms']}", "%Y-%m-%d %H:%M:%S")
    return (moment - datetime(2024, 1, 1)).total_seconds()


def _after(reader: _Reader, process: str | None, clock: float | None) -> float | None:
    ready = reader.activated.get(process)
    if ready is None or clock is None:
        return None
    return round(clock - ready, 3)


# --- the plugin's JIT log -----------------------------------------------------------------------------

def _plugin_log(path: str, raw_lines: Iterable) -> LogFile:
    compiles, seen = [], set()
    for number, raw in raw_lines:
        text = _decode(path, number, raw).strip()
        if not text:
            continue
        compile_ = _plugin_event(path, number, text)
        if compile_.identity() not in seen:
            seen.add(compile_.identity())
            compiles.append(compile_)
    return LogFile(path, "plugin JIT log", None, None, (), tuple(compiles))


def _plugin_event(path: str, number: int, text: str) -> Compile:
    try:
        event = json.loads(text)
    except ValueError as e:
        cut = " (cut short?)" if "Unterminated" in str(e) or "Expecting" in str(e) else ""
        raise PlanError(f"not a JSON line of the plugin's JIT log{cut}: {one_line(e, 120)}",
                        file=path, line=number) from None
    if not isinstance(event, dict) or not isinstance(event.get("backend"), str) \
            or not isinstance(event.get("kernel"), str):
        raise PlanError("a line of the plugin's JIT log without its backend and kernel (strings)",
                        file=path, line=number)
    backend = event["backend"]
    when = event.get("time")
    stamp = (datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
             if isinstance(when, (int, float)) and not isinstance(when, bool) and 0 <= when < 1e11 else None)
    return Compile(PLUGIN_BACKENDS.get(backend, backend), event["kernel"], _plugin_key(event), stamp, None,
                   path, number, "plugin", str(event.get("event") or "compile"), None,
                   _plain_constants(event.get("constants")))


def _plugin_key(event: dict) -> str | None:
    """Triton: the JIT key; DeepGEMM: the GEMM that compiled it (verify steps) or its cache entry."""
    if event.get("shape") is not None and event.get("m") is not None:
        return f"{event['shape']} m={event['m']}"
    for name in ("key", "cache_entry"):
        value = event.get(name)
        if value not in (None, "None", ""):
            return str(value)
    return None


def _plain_constants(constants) -> tuple:
    if not isinstance(constants, dict):
        return ()
    return tuple(sorted((str(name), str(value)) for name, value in constants.items()))
