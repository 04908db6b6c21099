"""`warmup engine --from-vllm [--gpu NAME] [-o FILE] -- <vllm serve arguments>`.

Builds vLLM's own EngineArgs -> VllmConfig from the arguments (vLLM's parser, vLLM's defaults
for `vllm serve`), then writes the engine config of what it resolved (vllm_bridge/engine/from_vllm.py).
Loaded by planner/commands/engine.py through the `warmup.engine_sources` entry point `vllm`, only
when --from-vllm is given: the planner never imports this module, vLLM or torch otherwise. Every
failure is a PlanError: one line, exit 2, nothing written.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys

from kernel_model.device import parse_capability
from planner.engine import hf
from planner.engine.releases import parse_release
from planner.errors import PlanError, one_line
from planner.output import emit
from .engine.standins import Device
from .releases import RELEASES

# A per-release plan is named after the release it follows (plans/vllm-0.33.yaml).
RELEASE_PLAN = re.compile(r"^vllm-(\d+\.\d+)$")
WHERE = "--from-vllm"


def supported_releases() -> list[str]:
    """Releases (major.minor) the project supports: the plugin's table (vllm_bridge.releases) is
    the one list; tests/vllm_bridge/test_from_vllm_cli.py checks each row has its plan and each plan a row."""
    minors = {parse_release(version)[:2] for version in RELEASES}
    return [f"{major}.{minor}" for major, minor in sorted(minors)]


def check_release(installed: str) -> None:
    """A vLLM release no plan follows would get a plan of another release's warmup: refuse it. The
    releases are exactly the plugin's (a patch release may change a warmup: 0.33.1 is not 0.33.0)."""
    if installed not in RELEASES:
        raise PlanError(f"vLLM {installed} is installed, and no plan supports it (supported releases: "
                        f"{', '.join(RELEASES)}; plans {', '.join(r.plan for r in RELEASES.values())})", file=WHERE)


def installed_release() -> str:
    try:
        import vllm
    except ImportError as e:
        raise PlanError(f"vLLM is not installed (import vllm: {e}); --from-vllm builds vLLM's own "
                        "config: install vllm, or use --from-hf", file=WHERE) from None
    return str(vllm.__version__)


def serve_arguments(argv: list[str]) -> list[str]:
    """`vllm serve MODEL ...` takes the model as its first positional; EngineArgs wants --model."""
    if argv and not argv[0].startswith("-"):
        return ["--model", argv[0], *argv[1:]]
    return list(argv)


def device_of(gpu: str) -> Device:
    """The stand-in device facts of a planner GPU name (planner/engine/hf/device.py GPUS), NVML-style named."""
    facts = hf.GPUS[gpu]
    return Device(name=f"NVIDIA {gpu}", capability=parse_capability(facts["capability"]),
                  total_memory=facts["memory_gib"] << 30, num_sms=facts["num_sms"])


def known_gpu(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    name = hf.gpu_name(gpu)
    if name is not None:
        return name
    raise PlanError(f"unknown GPU {gpu!r} (known: {', '.join(hf.GPUS)})", file=WHERE, path="--gpu")


def has_gpu() -> bool:
    import torch
    return torch.cuda.is_available()


VENDORED_DEEP_GEMM = "vllm.third_party.deep_gemm"


def stand_in_vendored_deep_gemm() -> bool:
    """The DeepGEMM vLLM vendors is in its wheel, but its extension links libtorch_cuda, which a
    machine without a GPU lacks: where the package is there and its import fails, register it
    unexecuted (its real spec), so vLLM's has_deep_gemm() answers as on the GPU machine. Without the
    package (a build without it) nothing changes. Nothing is launched. True if it stood in."""
    spec = importlib.util.find_spec(VENDORED_DEEP_GEMM)
    if spec is None:
        return False
    try:
        importlib.import_module(VENDORED_DEEP_GEMM)
        return False
    except (ImportError, OSError):  # 0.25: ImportError (libtorch_cuda.so); 0.33: OSError (libc10_cuda.so)
        for name in [m for m in sys.modules if m.startswith(VENDORED_DEEP_GEMM + ".")]:
            del sys.modules[name]  # what the failed import left half made
        sys.modules[VENDORED_DEEP_GEMM] = importlib.util.module_from_spec(spec)
        return True


def parse_engine_args(argv: list[str]):
    """vLLM's EngineArgs from `vllm serve` arguments, through vLLM's own parser; its usage error
    (an unknown flag, a bad value) becomes one line instead of a usage screen."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm serve"))

    def error(message: str):
        raise PlanError(f"vllm serve arguments: {message}", file=WHERE)
    parser.error = error  # argparse calls self.error on every usage error, then exits
    return EngineArgs.from_cli_args(parser.parse_args(serve_arguments(argv)))


def check_model_dir(model: str) -> None:
    """--from-vllm reads a local model directory: vLLM would otherwise go to the Hub."""
    if not os.path.isdir(model):
        raise PlanError("not a local model directory (--from-vllm reads config.json from a directory; "
                        "it does not download from the Hub)", file=model)
    if not os.path.isfile(os.path.join(model, "config.json")):
        raise PlanError("model directory without config.json", file=model)


def create_engine_config(engine_args):
    """vLLM's VllmConfig, as `vllm serve` resolves it (its usage context sets the serve defaults)."""
    from vllm.usage.usage_lib import UsageContext
    try:
        return engine_args.create_engine_config(UsageContext.OPENAI_API_SERVER)
    except Exception as e:  # vLLM refuses a configuration with ValueError, pydantic errors, ...
        raise PlanError(f"vLLM refused the configuration: {type(e).__name__}: {one_line(e, 400)}",
                        file=WHERE) from None


def build_engine(argv: list[str], gpu: str | None):
    """(engine, vLLM release, the model's config.json) from `vllm serve` arguments. Stand-ins replace the device only where
    there is no GPU: there the device facts are `gpu`'s (H100 unless given)."""
    release = installed_release()
    check_release(release)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if not has_gpu():
        from .engine.standins import install
        gpu = gpu or "H100"
        install(device_of(gpu))
        stand_in_vendored_deep_gemm()  # the linear-kernel selection asks whether DeepGEMM is there
    engine_args = parse_engine_args(argv)
    check_model_dir(str(engine_args.model))
    vllm_config = create_engine_config(engine_args)
    # the plugin's own derivation, refusals and all
    from .warmup.worker_plan import engine_of

    return engine_of(vllm_config, gpu, where=WHERE), release, os.path.join(str(engine_args.model), "config.json")


def cmd_from_vllm(args) -> int:
    """`warmup engine --from-vllm`: write the engine config of what vLLM resolved."""
    gpu = known_gpu(args.gpu)
    # vLLM logs to stdout, where the engine YAML goes without -o.
    with contextlib.redirect_stdout(sys.stderr):
        engine, release, config_json = build_engine(args.vllm_args, gpu)
    data = dict(engine.doc.data)
    if args.name:
        data["name"] = args.name
    data["description"] = (f"Generated by `warmup engine --from-vllm{' --gpu ' + gpu if gpu else ''} -- "
                           f"{' '.join(args.vllm_args)}` with vLLM {release}. " + data["description"])
    emit(hf.engine_to_yaml(data), args.output, inputs=[config_json])  # -o never over the model's config.json
    return 0
