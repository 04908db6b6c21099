"""The plugin inside one installed vLLM release, on CPU: `python probe.py < request.json > facts.json`.

Run by tests/integration/vllm_plugin/test_plugin.py in a subprocess whose sys.path holds the release. vLLM's
CUDA platform comes from vllm_bridge.engine.standins; the worker and model runner are recording
stand-ins (what they receive is vLLM's own objects, built by the plugin); nothing runs a kernel.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from vllm_bridge.cli import stand_in_vendored_deep_gemm  # noqa: E402
from vllm_bridge.engine.standins import Device, install  # noqa: E402


def derived_engine(request) -> dict:
    """The engine the plugin derives in a worker from a VllmConfig built from `vllm serve` arguments
    (the live config's stand-in: vLLM's own EngineArgs -> VllmConfig on the H100 stand-in)."""
    from vllm_bridge.cli import create_engine_config, parse_engine_args
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker_plan import derive_engine

    vllm_config = create_engine_config(parse_engine_args(request["serve_args"]))
    engine = derive_engine(vllm_config, Settings.from_env({"WARMUP_PLAN": request["plan"]}))
    return dict(engine.doc.data)


def main() -> None:
    request = json.load(sys.stdin)
    install(Device(name="NVIDIA H100 80GB HBM3", capability=(9, 0), total_memory=80 << 30, num_sms=132))
    stand_in_vendored_deep_gemm()  # as `warmup engine --from-vllm` does: the GPU worker imports it
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        out = {name: globals()[name](request) for name in request["checks"]}
    json.dump(out, sys.stdout)


def version(request) -> str:
    import vllm
    return vllm.__version__


def entry_point(request) -> dict:
    """vLLM's own loader finds and loads the entry point; without WARMUP_PLAN nothing is patched."""
    import importlib.metadata

    from vllm.plugins import load_plugins_by_group
    from vllm.v1.worker.gpu_worker import Worker

    os.environ.pop("WARMUP_PLAN", None)
    listed = [e.value for e in importlib.metadata.entry_points(group="vllm.general_plugins")
              if e.name == "warmup_planner"]
    plugins = load_plugins_by_group("vllm.general_plugins")
    before = (Worker.load_model, Worker.compile_or_warm_up_model)
    plugins["warmup_planner"]()
    return {"listed": listed, "loaded": "warmup_planner" in plugins,
            "inert": (Worker.load_model, Worker.compile_or_warm_up_model) == before
            and "_warmup_planner_originals" not in vars(Worker)}


def patch(request) -> dict:
    """With WARMUP_PLAN set, register patches this release's Worker, once."""
    from vllm.plugins import load_plugins_by_group
    from vllm.v1.worker.gpu_worker import Worker

    from vllm_bridge import plugin

    os.environ.update(WARMUP_PLAN=request["plan"], WARMUP_ENGINE=request["engine"])
    names = ("load_model", "determine_available_memory", "compile_or_warm_up_model")
    methods = lambda: tuple(getattr(Worker, name) for name in names)  # noqa: E731
    original = methods()
    load_plugins_by_group("vllm.general_plugins")["warmup_planner"]()
    first = methods()
    plugin.register()  # a second call (vLLM loads plugins once per process; a test may call again)
    out = {"patched": all(f is not o and f.__wrapped__ is o for f, o in zip(first, original)),
           "idempotent": methods() == first,
           "names": [f.__name__ for f in first]}
    plugin.unpatch_worker(plugin.release_for(version(request)))
    out["restored"] = methods() == original
    return out


def lazy(request) -> dict:
    """In a process that has not imported the GPU worker's module (vLLM's API server), register
    patches nothing and imports nothing; the engine core's import of the module patches it."""
    from vllm_bridge import plugin

    module = plugin.release_for(version(request)).worker_module
    os.environ.update(WARMUP_PLAN=request["plan"], WARMUP_ENGINE=request["engine"])
    before = module in sys.modules
    plugin.register()
    by_register = module in sys.modules
    from vllm.v1.worker.gpu_worker import Worker

    return {"imported_before": before, "imported_by_register": by_register,
            "patched_on_import": "_warmup_planner_originals" in vars(Worker)}


class RecordingModelRunner:
    """vLLM's model runner as far as the plugin touches it: capture_model and the KV connector."""

    def __init__(self, config):
        self.config = config
        self.captures: list = []
        self.kv_connector = NS(set_disabled=lambda flag: self.captures.append(("kv_connector_disabled", flag)))

    def capture_model(self):
        self.captures.append(list(self.config.compilation_config.cudagraph_capture_sizes))
        return 12345


class RecordingWorker:
    """vLLM's Worker as far as the plugin's runner uses it: execute_model and sample_tokens."""

    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.model_runner = RecordingModelRunner(vllm_config)
        self.device, self.rank, self.calls = "cpu", 0, []

    def execute_model(self, scheduler_output):
        self.calls.append(("execute_model", scheduler_output))

    def sample_tokens(self, grammar_output):
        self.calls.append(("sample_tokens", grammar_output))


def vllm_config_standin(request):
    from vllm.config import CompilationConfig
    return NS(compilation_config=CompilationConfig(), speculative_config=None)


def runner(request) -> dict:
    """The plan's batch and capture steps, run by the executor through VllmWorkerRunner."""
    from vllm_bridge import releases
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker import WorkerWarmup

    release = releases.release_for(version(request))
    worker = RecordingWorker(vllm_config_standin(request))
    state = WorkerWarmup.prepare(worker, release, Settings(request["plan"], engine=request["engine"]))
    state.run_plan()
    return {"calls": [describe(kind, obj) for kind, obj in worker.calls],
            "captures": worker.model_runner.captures,
            "statuses": {r.id: r.status for r in state.report.steps}}


def redirect(request) -> dict:
    """vLLM's compile_or_warm_up_model, in this release's order of calls, with the plan in place:
    vLLM's kernel_warmup runs with its DeepGEMM warmup off, then the plan; warmup_kernels is
    skipped; capture_model answers the bytes of the plan's capture. Restored afterwards."""
    import vllm.model_executor.warmup.kernel_warmup as kernel_module
    import vllm.v1.worker.gpu_worker as worker_module

    from vllm_bridge import releases
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker import WorkerWarmup

    release = releases.release_for(version(request))
    seen, real_dg, real_batches = [], kernel_module.deep_gemm_warmup, worker_module.warmup_kernels

    def vllm_kernel_warmup(worker):  # stands in for vLLM's (which needs a loaded model)
        seen.append({"deep_gemm_warmup_is_vllms": kernel_module.deep_gemm_warmup is real_dg,
                     "plan_ran_before": len(worker.calls)})

    worker = RecordingWorker(vllm_config_standin(request))
    state = WorkerWarmup.prepare(worker, release, Settings(request["plan"], engine=request["engine"]))
    kept, worker_module.kernel_warmup = worker_module.kernel_warmup, vllm_kernel_warmup

    def vllm_method():  # the calls compile_or_warm_up_model makes, in this release's order
        worker_module.kernel_warmup(worker)
        order = [lambda: worker_module.warmup_kernels(worker.model_runner, worker.execute_model,
                                                      worker.sample_tokens),
                 worker.model_runner.capture_model]
        results = [call() for call in (order if version(request) == "0.33.0" else order[::-1])]
        return [r for r in results if r is not None]
    try:
        result = state.warm_up(vllm_method)
    finally:
        worker_module.kernel_warmup = kept
    return {"seen": seen, "result": result, "captures": len([c for c in worker.model_runner.captures
                                                             if not isinstance(c, tuple)]),
            "batches": len(worker.calls), "plan_batches": sum(1 for s in state.in_worker_plan().steps
                                                              if hasattr(s, "runner_method") and
                                                              s.kind != "cudagraph"),
            "restored": worker_module.warmup_kernels is real_batches and kernel_module.deep_gemm_warmup is real_dg
            and "capture_model" not in vars(worker.model_runner)}


# --- issue 44: the plugin steps aside, through vLLM's own start-up ----------------------------------------

SERVER_ROLES = ("load_model", "determine_available_memory", "compile_or_warm_up_model")  # the executor's order


def start_up(request) -> dict:
    """Each case: one vLLM start-up with the plugin on, in a process of its own (forked once vLLM is
    imported and the models' configs resolved once, as a server that has started before finds them).
    The process is every role of an offline LLM without multiprocessing: vLLM loads its plugins
    (EngineArgs), resolves the VllmConfig (the plugin's build-ahead wrapper around it), imports the
    GPU worker (the plugin patches it) and calls the worker's three methods in the executor's order."""
    from vllm_bridge.cli import create_engine_config, parse_engine_args

    for args in {tuple(case["serve_args"]) for case in request["cases"].values()}:
        create_engine_config(parse_engine_args(list(args)))  # WARMUP_PLAN unset here: the plugin is inert
    return {name: forked(functools.partial(start_up_case, case)) for name, case in request["cases"].items()}


def forked(run) -> dict:
    """run() in a child process (a fresh plugin: vLLM loads plugins once per process); its answer."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = run()
        except BaseException as e:  # noqa: BLE001 - reported, the parent decides
            out = {"crashed": f"{type(e).__name__}: {e}"}
        with os.fdopen(write, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


class PluginLines(logging.Handler):
    """What the plugin says in vLLM's log, every level (vLLM's own handler prints ERROR only here)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list = []
        logger = logging.getLogger("vllm.warmup_planner")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)

    def emit(self, record):
        self.lines.append([record.levelname, record.getMessage()])


class StockMethods:
    """vLLM's three Worker methods as stand-ins (the real ones need a GPU), installed before the
    plugin patches the class: each records whether what vLLM's own would call is vLLM's (the plugin
    stepped aside) or the plugin's (its plan in place)."""

    def __init__(self):
        import vllm.model_executor.warmup.kernel_warmup as kernel_module
        import vllm.v1.worker.gpu_worker as worker_module

        self.worker_module, self.kernel_module, self.calls = worker_module, kernel_module, []
        self.vllms = {"kernel_warmup": worker_module.kernel_warmup, "warmup_kernels": worker_module.warmup_kernels,
                      "deep_gemm_warmup": kernel_module.deep_gemm_warmup}
        stock = self
        cls = worker_module.Worker

        def load_model(worker, *args, **kwargs):
            stock.calls.append(["load_model", {}])

        def determine_available_memory(worker, *args, **kwargs):
            stock.calls.append(["determine_available_memory",
                                {"profile_run_is_vllms": "profile_run" not in vars(worker.model_runner)}])
            return 1 << 30

        def compile_or_warm_up_model(worker, *args, **kwargs):
            stock.calls.append(["compile_or_warm_up_model", stock.what_vllm_calls(worker)])

        cls.load_model, cls.determine_available_memory = load_model, determine_available_memory
        cls.compile_or_warm_up_model = compile_or_warm_up_model

    def what_vllm_calls(self, worker) -> dict:
        return {"kernel_warmup_is_vllms": self.worker_module.kernel_warmup is self.vllms["kernel_warmup"],
                "warmup_kernels_is_vllms": self.worker_module.warmup_kernels is self.vllms["warmup_kernels"],
                "deep_gemm_warmup_is_vllms": self.kernel_module.deep_gemm_warmup is self.vllms["deep_gemm_warmup"],
                "capture_model_is_vllms": "capture_model" not in vars(worker.model_runner)}

    def worker(self, vllm_config, rank: int):
        """vLLM's Worker (patched by the plugin) with what its init_device would have set on CPU."""
        worker = self.worker_module.Worker.__new__(self.worker_module.Worker)
        worker.vllm_config, worker.rank, worker.local_rank, worker.device = vllm_config, rank, rank, "cpu"
        worker.model_runner = StockModelRunner()
        return worker


class StockModelRunner:
    """vLLM's model runner as far as the plugin swaps its methods (on the instance: vars() shows them)."""

    def profile_run(self):
        return None

    def capture_model(self):
        return 0


def start_up_case(case) -> dict:
    import threading

    import vllm
    import vllm.plugins

    from vllm_bridge.cli import create_engine_config, parse_engine_args

    os.environ.update(case["env"])
    if case.get("version"):
        vllm.__version__ = case["version"]
    said, stock = PluginLines(), StockMethods()
    vllm.plugins.plugins_loaded = False  # this process is a fresh one
    out = {"error": None}
    try:
        vllm_config = create_engine_config(parse_engine_args(case["serve_args"]))  # plugins loaded, then the config
        for thread in threading.enumerate():
            if thread.name == "warmup-build-ahead":
                thread.join(120)
        worker = stock.worker(vllm_config, case.get("rank", 0))
        for role in SERVER_ROLES:
            getattr(worker, role)()
    except Exception as e:  # noqa: BLE001 - what stopped vLLM's start is the fact checked
        out["error"] = {"type": type(e).__name__, "message": str(e)}
    out.update(lines=said.lines, stock=stock.calls,
               patched="_warmup_planner_originals" in vars(stock.worker_module.Worker),
               report_written=os.path.exists(case["env"].get("WARMUP_PLAN_REPORT") or "/nonexistent"))
    if case["env"].get("WARMUP_TIMELINE"):  # issue 54: the marks this start-up's process wrote
        folder = case["env"]["WARMUP_TIMELINE"]
        out["timeline"] = [json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]
    if case.get("child"):
        out["child"] = forked(engine_core_register)
    return out


def engine_core_register() -> dict:
    """A process vLLM starts from this one (the engine core): it inherits the environment and loads
    the plugins again."""
    import vllm.plugins
    import vllm.v1.worker.gpu_worker as worker_module

    said = PluginLines()
    vllm.plugins.plugins_loaded = False
    error = None
    try:
        vllm.plugins.load_general_plugins()
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    return {"error": error, "lines": said.lines, "patched": "_warmup_planner_originals" in vars(worker_module.Worker)}


def describe(kind: str, obj) -> dict:
    """What vLLM's model runner reads from the object it is handed (and its class, to check it is vLLM's)."""
    if kind == "sample_tokens":
        if obj is None:
            return {"kind": kind, "grammar": None}
        return {"kind": kind, "class": f"{type(obj).__module__}.{type(obj).__name__}",
                "grammar": [list(obj.structured_output_request_ids), list(obj.grammar_bitmask.shape),
                            int(obj.grammar_bitmask.flat[0])]}
    new = [{"class": type(r).__name__, "req_id": r.req_id, "block_ids": [list(b) for b in r.block_ids],
            "prompt_token_ids": list(r.prompt_token_ids), "num_computed_tokens": r.num_computed_tokens,
            "temperature": r.sampling_params.temperature} for r in obj.scheduled_new_reqs]
    c = obj.scheduled_cached_reqs
    cached = {"class": type(c).__name__, "req_ids": list(c.req_ids), "num_computed_tokens": list(c.num_computed_tokens),
              "num_output_tokens": list(c.num_output_tokens),
              "new_block_ids": [None if b is None else [list(g) for g in b] for b in c.new_block_ids]}
    return {"kind": kind, "class": f"{type(obj).__module__}.{type(obj).__name__}", "new": new, "cached": cached,
            "num_scheduled_tokens": dict(obj.num_scheduled_tokens),
            "total_num_scheduled_tokens": obj.total_num_scheduled_tokens,
            "scheduled_spec_decode_tokens": {k: list(v) for k, v in obj.scheduled_spec_decode_tokens.items()},
            "finished_req_ids": sorted(obj.finished_req_ids)}


if __name__ == "__main__":
    main()
