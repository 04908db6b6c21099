"""Issue 54 item 1: the start-up timeline, on CPU without vLLM (vllm_bridge/timeline.py), its merge and
side-by-side (bench/startup_timeline.py) and its plot's layout (bench/plot_startup_timeline.py).

Through vLLM 0.25's and 0.33's own start-up: tests/integration/vllm_plugin/test_timeline_vllm.py.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import types
from types import SimpleNamespace as NS

import pytest
from test_step_aside import StockWorker, wrapped

from tests.bench.test_vllm_startup_bench import BENCH, load  # the bench scripts loaded by path
from vllm_bridge import plugin, timeline
from vllm_bridge.settings import Settings
from vllm_bridge.warmup import phases as ph
from vllm_bridge.warmup.log_lines import LogProgress
from vllm_bridge.warmup.worker import WorkerWarmup

LOGGER = "vllm.warmup_planner"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No recorder, and no start named by a process before this one."""
    timeline.reset()
    monkeypatch.delenv(timeline.START, raising=False)
    monkeypatch.delenv("WARMUP_TIMELINE", raising=False)
    monkeypatch.delenv("WARMUP_PLAN_REPORT", raising=False)
    yield
    timeline.reset()


def written(directory) -> dict:
    """role -> the document of each timeline file in the directory."""
    out = {}
    for name in sorted(os.listdir(directory)):
        assert name.startswith("timeline.") and name.endswith(".json"), name  # no temporary file left
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            doc = json.load(f)
        assert name == f"timeline.{doc['role']}.{doc['pid']}.json"
        out[doc["role"]] = doc
    return out


def phases_of(doc: dict) -> list[tuple[str, str]]:
    return [(m["phase"], m["owner"]) for m in doc["marks"]]


# --- the recorder ------------------------------------------------------------------------------------------

def fake_proc(tmp_path, comm: str, ticks: int, uptime: float):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    fields = ["S", "1", "1", "1"] + ["0"] * 15 + [str(ticks), "123456"]  # fields 3..23: 22 is the start time
    (proc / "self" / "stat").write_text(f"4242 ({comm}) {' '.join(fields)}\n")
    (proc / "uptime").write_text(f"{uptime:.2f} 9999.00\n")
    return str(proc)


def test_the_process_start_is_read_from_proc_past_a_command_name_with_spaces_and_parentheses(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    proc = fake_proc(tmp_path, "vllm: (API) server", ticks=50 * hz, uptime=80.0)  # started 30 s ago
    before = time.time()
    started = timeline.process_start_time(proc)
    assert before - 30.01 <= started <= time.time() - 29.99
    assert timeline.process_start_time(str(tmp_path / "no-proc")) is None
    (tmp_path / "proc" / "self" / "stat").write_text("4242 (x)\n")
    assert timeline.process_start_time(proc) is None


def test_this_processes_start_is_before_now_and_after_boot():
    started = timeline.process_start_time()
    with open("/proc/uptime") as f:
        boot = time.time() - float(f.read().split()[0])
    assert boot - 1 <= started <= time.time()


def test_the_role_comes_from_the_name_vllm_gives_its_processes():
    assert timeline.role_of("MainProcess", first=True) == ("api_server", None)
    assert timeline.role_of("MainProcess", first=False) == ("process", None)
    assert timeline.role_of("EngineCore", first=False) == ("engine_core", None)
    assert timeline.role_of("EngineCore_DP1", first=False) == ("engine_core_dp1", None)
    assert timeline.role_of("VllmWorker-3", first=False) == ("worker_rank3", 3)
    assert timeline.role_of("VllmWorker-x", first=False) == ("process", None)


def test_the_directory_is_warmup_timeline_else_the_reports_and_nothing_without_either(tmp_path):
    assert timeline.directory_of(Settings("p", report=str(tmp_path / "r" / "report.json"))) == str(tmp_path / "r")
    assert timeline.directory_of(Settings("p", report="report.json", timeline="/t")) == "/t"
    assert timeline.directory_of(Settings("p")) is None
    assert Settings.from_env({"WARMUP_TIMELINE": "/t"}).timeline == "/t"
    assert Settings.from_env({}).timeline is None


def test_nothing_is_recorded_or_written_without_a_directory(tmp_path):
    environ = {}
    assert timeline.begin(Settings("p"), environ) is None
    timeline.mark("load_model", 1.0, 2.0)
    with timeline.span("plugin: plan", timeline.PLUGIN):
        pass
    assert timeline.current() is None and environ == {}


def test_the_first_process_names_the_start_and_writes_its_marks_as_json(tmp_path):
    environ = {}
    recorder = timeline.begin(Settings("p", timeline=str(tmp_path)), environ)
    assert environ[timeline.START] == recorder.start_id and recorder.role == "api_server"
    with timeline.span("plugin: register", timeline.PLUGIN):
        time.sleep(0.01)
    timeline.mark("plugin: bundle pull", 5.0, 6.0, timeline.PLUGIN, background=True, reference="oci://r/x")
    doc = written(tmp_path)["api_server"]
    assert doc["format"] == "warmup-timeline/1" and doc["pid"] == os.getpid() and doc["ppid"] == os.getppid()
    assert doc["start_id"] == recorder.start_id and doc["rank"] is None
    assert doc["process_start_source"] == "/proc"
    assert doc["process_start"] == pytest.approx(timeline.process_start_time(), abs=0.05)  # /proc/uptime: 10 ms
    first, register, pull = doc["marks"]
    assert (first["phase"], first["owner"], first["start"]) == ("process start to plugin load", "vllm",
                                                                doc["process_start"])
    assert first["end"] <= register["start"] and register["owner"] == "plugin"
    assert register["end"] - register["start"] >= 0.009 and "background" not in register
    assert pull == {"phase": "plugin: bundle pull", "owner": "plugin", "start": 5.0, "end": 6.0,
                    "background": True, "reference": "oci://r/x"}


def test_without_proc_the_process_start_is_the_first_mark(tmp_path):
    recorder = timeline.begin(Settings("p", timeline=str(tmp_path)), {}, proc=str(tmp_path / "none"))
    doc = written(tmp_path)[recorder.role]
    first = doc["marks"][0]
    assert doc["process_start"] is None and doc["process_start_source"] == "first mark"
    assert first["start"] == first["end"]


def test_a_later_process_of_the_start_keeps_its_id(tmp_path):
    environ = {timeline.START: "1-2"}
    recorder = timeline.begin(Settings("p", timeline=str(tmp_path)), environ)
    assert (recorder.start_id, recorder.role) == ("1-2", "process") and environ == {timeline.START: "1-2"}


def test_a_timeline_that_cannot_be_written_is_one_line_and_never_stops_vllm(tmp_path, caplog):
    (tmp_path / "a-file").write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        recorder = timeline.begin(Settings("p", timeline=str(tmp_path / "a-file" / "t")), {})
        timeline.mark("load_model", 1.0, 2.0)
        with timeline.span("Worker.load_model"):
            pass
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("warmup-planner: the start-up timeline is not written: ")
    assert "a-file" in lines[0] and recorder.failed and len(recorder.marks) == 1


def test_beside_a_report_that_cannot_be_written_the_reports_line_alone_is_said(tmp_path, caplog):
    (tmp_path / "a-file").write_text("not a directory")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        recorder = timeline.begin(Settings("p", report=str(tmp_path / "a-file" / "report.json")), {})
    assert recorder.failed and [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_a_mark_that_fails_is_one_line_and_recording_stops(tmp_path, caplog, monkeypatch):
    timeline.begin(Settings("p", timeline=str(tmp_path)), {})
    monkeypatch.setattr(timeline.Recorder, "mark", lambda *a, **k: 1 / 0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        timeline.mark("load_model", 1.0, 2.0)
        timeline.mark("load_model", 1.0, 2.0)
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: the start-up timeline is not written: ZeroDivisionError: division by zero"]


def test_a_process_forked_after_register_writes_a_timeline_of_its_own(tmp_path):
    """vLLM loads its plugins once per process: a forked worker inherits the parent's recorder, whose
    marks are not its own."""
    parent = timeline.begin(Settings("p", timeline=str(tmp_path)), {})
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            timeline.mark("load_model", 1.0, 2.0)
            child = timeline.current()
            answer = [child.pid, child.role, child.start_id, [m["phase"] for m in child.marks]]
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            answer = repr(e)
        with os.fdopen(write, "w") as f:
            json.dump(answer, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        answer = json.load(f)
    os.waitpid(pid, 0)
    assert answer == [pid, "process", parent.start_id, ["load_model"]]
    assert phases_of(written(tmp_path)["api_server"]) == [("process start to plugin load", "vllm")]
    with open(tmp_path / f"timeline.process.{pid}.json") as f:
        assert [m["phase"] for m in json.load(f)["marks"]] == ["load_model"]


# --- what the plugin marks -----------------------------------------------------------------------------------

def test_register_marks_itself_even_where_the_plugin_is_inert(tmp_path, monkeypatch):
    monkeypatch.setenv("WARMUP_TIMELINE", str(tmp_path))
    monkeypatch.delenv("WARMUP_PLAN", raising=False)
    plugin.register()
    assert phases_of(written(tmp_path)["api_server"]) == [("process start to plugin load", "vllm"),
                                                          ("plugin: register", "plugin")]


def test_vllms_engine_config_is_timed_in_the_process_that_imported_it(tmp_path, monkeypatch):
    class EngineArgs:
        def create_engine_config(self, usage=None):
            return ("config", usage)

    module = types.ModuleType("vllm.engine.arg_utils")
    module.EngineArgs = EngineArgs
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", module)
    timeline.begin(Settings("p", timeline=str(tmp_path)), {})
    assert timeline.watch_engine_args() and timeline.watch_engine_args()  # once
    assert EngineArgs().create_engine_config(usage="serve") == ("config", "serve")
    timeline.unwatch_engine_args()
    assert EngineArgs().create_engine_config() == ("config", None)
    assert [p for p, _ in phases_of(written(tmp_path)["api_server"])] == [
        "process start to plugin load", "engine config (arguments, model resolution)"]
    monkeypatch.delitem(sys.modules, "vllm.engine.arg_utils")
    assert not timeline.watch_engine_args()  # never imported for this


def test_the_workers_methods_are_vllms_with_the_plugins_own_work_nested_and_ready_after(tmp_path, monkeypatch):
    """A plan that cannot be made: the plugin's attempt is its own mark inside vLLM's load_model."""
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, *a: 1 / 0))
    timeline.begin(Settings("p", timeline=str(tmp_path)), {})
    worker = StockWorker(rank=2)
    for method in wrapped(Settings("vllm-0.25", timeline=str(tmp_path))):
        method(worker)
    doc = written(tmp_path)["api_server"]
    assert doc["rank"] == 2
    assert phases_of(doc)[1:] == [("plugin: engine and plan", "plugin"), ("Worker.load_model", "vllm"),
                                  ("Worker.determine_available_memory", "vllm"),
                                  ("Worker.compile_or_warm_up_model", "vllm"), ("ready", "vllm")]
    marks = {m["phase"]: m for m in doc["marks"]}
    load_model, ours = marks["Worker.load_model"], marks["plugin: engine and plan"]
    assert load_model["start"] <= ours["start"] <= ours["end"] <= load_model["end"]
    assert marks["ready"]["start"] >= marks["Worker.compile_or_warm_up_model"]["end"]


def test_vllms_phases_and_the_plugins_are_marked_with_their_owner_and_counts(tmp_path):
    timeline.begin(Settings("p", timeline=str(tmp_path)), {})
    monitor = NS(begin_step=lambda name: None, end_step=lambda: None)
    phases = ph.Phases(monitor)
    with phases.phase("profile run"):
        pass
    with phases.phase("generic Triton variants", timeline.PLUGIN):
        pass
    progress = LogProgress(NS(steps=[]))
    progress.stage_start("deep_gemm", 3, 30)
    progress.stage_end({"stage": "deep_gemm"})
    progress.stage_end({"stage": "deep_gemm"})  # a stage never started: no mark
    doc = written(tmp_path)["api_server"]
    assert phases_of(doc)[1:] == [("profile run", "vllm"), ("generic Triton variants", "plugin"),
                                  ("plan: deep_gemm", "plugin")]
    assert doc["marks"][1]["compiled"] == phases.rows[0]["compiled"]


# --- the merge and the side-by-side ------------------------------------------------------------------------

def process(start_id, role, pid, t0, marks, rank=None):
    return {"format": "warmup-timeline/1", "start_id": start_id, "role": role, "rank": rank, "pid": pid,
            "ppid": 1, "process_name": "x", "process_start": t0, "process_start_source": "/proc",
            "marks": [{"phase": p, "owner": o, "start": t0 + s, "end": t0 + e, **extra}
                      for p, o, s, e, *rest in marks for extra in [rest[0] if rest else {}]]}


def write_start(directory, start_id, t0, engine_load=20.0, plan=True):
    """An API server and its engine core (TP 1: rank 0's worker in it), seconds from t0."""
    directory.mkdir(exist_ok=True)
    api = process(start_id, "api_server", 100, t0, [
        ("process start to plugin load", "vllm", 0, 17), ("plugin: register", "plugin", 17, 17.5),
        ("engine config (arguments, model resolution)", "vllm", 18, 20),
        ("plugin: plan ahead (FlashInfer's modules)", "plugin", 18, 25, {"background": True})])
    marks = [("process start to plugin load", "vllm", 0, 16), ("plugin: register", "plugin", 16, 16.2),
             ("Worker.load_model", "vllm", 16.5, 16.5 + engine_load),
             ("plugin: engine and plan", "plugin", 16.5, 17.5), ("plugin: monitor and pool start", "plugin", 17.5, 18),
             ("load_model", "vllm", 18, 16.5 + engine_load)]
    if plan:
        marks += [("plugin: plan", "plugin", 40, 50), ("plan: deep_gemm", "plugin", 40, 45),
                  ("plan: cudagraph", "plugin", 45, 50)]
    marks.append(("ready", "vllm", 51, 51))
    core = process(start_id, "engine_core", 200, t0 + 20, marks, rank=0)
    for doc in (api, core):
        (directory / f"timeline.{doc['role']}.{doc['pid']}.json").write_text(json.dumps(doc))


@pytest.fixture()
def merge():
    return load("startup_timeline")


def test_one_start_is_merged_onto_the_first_processes_clock_with_the_plugins_share(tmp_path, merge):
    write_start(tmp_path / "a", "s1", 1000.0)
    start = merge.load_start(str(tmp_path / "a"))
    assert start["t0"] == 1000.0 and [d["role"] for d in start["processes"]] == ["api_server", "engine_core"]
    rows = {(r["process"], r["phase"]): r for r in merge.rows(start)}
    load_model = rows[("engine_core", "Worker.load_model")]
    assert (load_model["start"], load_model["end"], load_model["wall_s"]) == (36.5, 56.5, 20.0)
    assert load_model["plugin_s"] == 1.5  # engine and plan, then the pool's start: 1.0 + 0.5
    assert rows[("engine_core", "plugin: plan")]["plugin_s"] == 10.0
    assert rows[("engine_core", "ready")]["start"] == 71.0
    # the plan ahead runs beside vLLM (a thread): not the plugin's share of vLLM's engine config
    assert rows[("api_server", "engine config (arguments, model resolution)")]["plugin_s"] == 0.0
    assert rows[("api_server", "plugin: plan ahead (FlashInfer's modules)")]["background"] is True
    text = merge.table(start, merge.rows(start))
    assert "engine_core      Worker.load_model" in text and "(beside)" in text


def test_nested_plugin_marks_count_once_in_a_phases_share(merge):
    assert merge.covered([(1, 5), (2, 3), (4, 8)], 0, 6) == 5
    assert merge.covered([(7, 9)], 0, 6) == 0
    assert merge.covered([], 0, 6) == 0


def test_a_directory_of_several_starts_gives_the_newest(tmp_path, merge):
    write_start(tmp_path / "a", "old", 1000.0)
    (tmp_path / "a" / "not-a-timeline.json").write_text("{}")
    for name in os.listdir(tmp_path / "a"):  # the same names: the newer start's pids differ
        if name.startswith("timeline."):
            os.rename(tmp_path / "a" / name, tmp_path / "a" / name.replace(".json", "0.json"))
    write_start(tmp_path / "a", "new", 2000.0)
    start = merge.load_start(str(tmp_path / "a"))
    assert start["start_id"] == "new" and len(start["processes"]) == 2
    with pytest.raises(SystemExit, match="no start-up timeline"):
        merge.load_start(str(tmp_path))


def test_two_starts_side_by_side_phase_by_phase(tmp_path, merge):
    write_start(tmp_path / "a", "s1", 1000.0, engine_load=20.0)
    write_start(tmp_path / "b", "s2", 5000.0, engine_load=12.0, plan=False)
    a, b = (merge.rows(merge.load_start(str(tmp_path / n))) for n in "ab")
    pairs = {(r["process"], r["phase"]): r for r in merge.side_by_side(a, b)}
    load_model = pairs[("engine_core", "Worker.load_model")]
    assert (load_model["d_wall_s"], load_model["d_end_s"]) == (-8.0, -8.0)
    assert pairs[("engine_core", "ready")]["d_end_s"] == 0.0
    plan = pairs[("engine_core", "plan: deep_gemm")]
    assert plan["b"] is None and plan["d_wall_s"] is None and plan["a"]["wall_s"] == 5.0
    assert [r["phase"] for r in merge.side_by_side(b, a)][-3:] == ["plugin: plan", "plan: deep_gemm",
                                                                   "plan: cudagraph"]  # only A's: at the end


def test_the_command_prints_the_table_and_writes_the_rows(tmp_path):
    write_start(tmp_path / "a", "s1", 1000.0)
    write_start(tmp_path / "b", "s2", 5000.0, engine_load=12.0)
    script = os.path.join(BENCH, "startup_timeline.py")
    one = subprocess.run([sys.executable, script, str(tmp_path / "a"), "--json", str(tmp_path / "one.json")],
                         capture_output=True, text=True, check=True)
    assert one.stdout.splitlines()[0].startswith("start s1: 2 processes: api_server (pid 100), engine_core (pid 200)")
    assert len(json.loads((tmp_path / "one.json").read_text())) == 14
    two = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True, check=True)
    line = next(x for x in two.stdout.splitlines() if "Worker.load_model" in x)
    assert line.split()[-2:] == ["-8.00", "-8.00"]
    assert two.stdout == subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "b")],
                                        capture_output=True, text=True, check=True).stdout  # deterministic


def test_the_plot_draws_one_run_per_process_on_the_starts_clock(tmp_path):
    plot = load("plot_startup_timeline")
    write_start(tmp_path / "a", "s1", 1000.0)
    runs = plot.timeline_runs(str(tmp_path / "a"))
    assert [label for label, _ in runs] == ["a: api_server (100)", "a: engine_core (200)"]
    lay = plot.layout(runs)
    bars = {(lay["rows"][b["row"]]["run"], b["name"]): b for b in lay["bars"]}
    load_model = bars[("a: engine_core (200)", "Worker.load_model")]
    assert (load_model["start"], load_model["end"], load_model["category"]) == (36.5, 56.5, "weights")
    assert bars[("a: engine_core (200)", "plugin: engine and plan")]["category"] == "plugin plan / pool"
    assert ("a: engine_core (200)", "ready") not in bars  # an instant: the dashed line
    assert [m["at"] for m in lay["marks"]] == [71.0]
    assert plot.is_timeline(str(tmp_path / "a")) and not plot.is_timeline("runs/x/result.json")
