"""The layers vLLM builds for a model, on one rank: its own model class, instantiated on the meta device.

Run by tests/integration/from_vllm/test_model_layers.py in a subprocess whose sys.path holds one vLLM release
(`python layers_oracle.py OUT.json < cases.json`). Each case names a model directory (a
config.json, nothing else), a tensor-parallel size and, where given, a data-parallel size and
expert parallelism. vLLM resolves the config as `vllm serve`
does (EngineArgs -> VllmConfig, its transformers config class filling the defaults a config.json
leaves out), picks the model class from its registry, and builds it under torch.device("meta"):
every parallel linear, fused-MoE layer and attention layer is vLLM's own, sharded as on rank 0 of
`tp` ranks (the tensor-parallel group is a stand-in that says its size; no process group, no
kernel, no weight is loaded). The facts each layer reports are read back, with the config dict
`--from-vllm` derives its engine from (vllm_bridge/engine/from_vllm.py's _hf_config_dict): a linear's
output/input size per partition and its quant method, the experts held and their width, each
attention layer's heads, head size, scale, soft cap, sliding window and backend.

The device is vllm_bridge/engine/standins.py's H100: vLLM's CUDA platform with that GPU's facts.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from vllm_bridge.cli import stand_in_vendored_deep_gemm  # noqa: E402
from vllm_bridge.engine.standins import Device, install  # noqa: E402


class Group:
    """vLLM's GroupCoordinator as the model constructors read it: a size and rank 0 (its
    device_group answers size() and rank() as a torch process group would)."""

    def __init__(self, size: int):
        self.world_size, self.rank_in_group, self.rank, self.local_rank = size, 0, 0, 0
        self.ranks = list(range(size))
        self.is_first_rank = self.is_last_rank = True
        self.device_group = self.cpu_group = self

    def size(self) -> int:
        return self.world_size


# The compiled activation ops vLLM's activation layers look up when they are built
# (vllm/model_executor/layers/activation.py, 0.25.0 and 0.33.0).
ACTIVATION_OPS = ("fatrelu_and_mul", "gelu_and_mul", "gelu_fast", "gelu_new", "gelu_quick", "gelu_tanh",
                  "gelu_tanh_and_mul", "mul_and_silu", "relu2_no_mul", "relu_squared", "silu_and_mul",
                  "silu_and_mul_with_clamp", "situ_and_mul", "swigluoai_and_mul", "swiglustep_and_mul")


class AnyOp:
    """A compiled op a layer's constructor looks up (an activation's torch.ops._C.gelu_tanh_and_mul):
    nothing is called on the meta device."""

    def __init__(self, name: str):
        self.name, self.default = name, self

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torch.ops._C.{self.name} is a stand-in: no kernel runs here")


# transformers' image processors of the multimodal models built here: they import torchvision,
# which this environment lacks; the model's layers never call them.
IMAGE_PROCESSORS = ("transformers.models.gemma3.image_processing_gemma3",)


class Permissive(types.ModuleType):
    """A module whose every attribute is a stand-in (torchvision, for image processors never run)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        self.__path__ = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return PermissiveType(name, (), {"__init__": lambda self, *a, **k: None,
                                         "__call__": lambda self, *a, **k: None})


class PermissiveType(type):
    """A stand-in class whose every class attribute is another stand-in (InterpolationMode.NEAREST)."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return PermissiveType(name, (), {})


class NoStream:
    """torch.cuda.Stream and Event for the shared experts' side stream: made, never used."""

    def __init__(self, *args, **kwargs):
        pass


def stand_ins() -> None:
    """What building a model on a machine without a GPU needs beyond vllm_bridge/engine/standins.py: the
    compiled activation ops a constructor names, CUDA stream and event objects, a model-class inspection in this process
    (vLLM inspects in a subprocess, which has none of the stand-ins), and the image processors a
    multimodal model module imports where torchvision is absent (none is run)."""
    import torch

    for name in ACTIVATION_OPS:
        if not hasattr(torch.ops._C, name):
            setattr(torch.ops._C, name, AnyOp(name))
    torch.cuda.Stream = torch.cuda.Event = NoStream
    # Under expert parallelism vLLM logs the expert map (fused_moe/expert_map_manager.py,
    # ExpertMapManager.get_compressed_map_string), reading values a meta tensor has not: a log line,
    # nothing a layer's shape reads
    # vLLM 0.25.0's Marlin MoE sizes its workspace by the SM count when GPTQ experts are built
    # (platforms/cuda.py num_compute_units asks torch.cuda): the stand-in H100's 132
    from vllm.platforms import current_platform
    type(current_platform).num_compute_units = classmethod(lambda cls, device_id=0: 132)
    from vllm.model_executor.layers.fused_moe import expert_map_manager
    expert_map_manager.ExpertMapManager.get_compressed_map_string = lambda self: "(meta device)"
    if importlib.util.find_spec("torchvision") is None:
        for name in IMAGE_PROCESSORS:
            sys.modules[name] = Permissive(name)
    from vllm.model_executor.models import registry
    registry._run_in_subprocess = lambda fn: fn()


def main() -> None:
    cases = json.load(sys.stdin)
    install(Device(name="NVIDIA H100 80GB HBM3", capability=(9, 0), total_memory=80 << 30, num_sms=132))
    stand_in_vendored_deep_gemm()
    stand_ins()
    out = []
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        for case in cases:
            try:
                out.append(layers(case))
            except Exception as e:  # noqa: BLE001 - reported per case, the test says which
                out.append({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]})
    with open(sys.argv[1], "w", encoding="utf-8") as f:  # not stdout: vLLM's log handler holds it
        json.dump(out, f)


def vllm_config(case: dict):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    args = EngineArgs(model=case["dir"], tensor_parallel_size=case["tp"], max_model_len=case.get("max_model_len"),
                      skip_tokenizer_init=True, enforce_eager=True, num_gpu_blocks_override=1024,
                      trust_remote_code=case.get("trust_remote_code", False), load_format="dummy",
                      dtype=case.get("dtype", "auto"), data_parallel_size=case.get("dp", 1),
                      enable_expert_parallel=case.get("ep", False))
    return args.create_engine_config(UsageContext.OPENAI_API_SERVER)


def layers(case: dict) -> dict:
    import torch
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import get_model_architecture

    config = vllm_config(case)
    config.device_config.device = torch.device("meta")  # where the Transformers backend puts its weights
    tp = case["tp"]
    parallel_state._TP = Group(tp)
    parallel_state._WORLD = Group(tp)
    for name in ("_PP", "_DP", "_EP", "_DCP", "_PCP", "_EPLB"):
        if hasattr(parallel_state, name):
            setattr(parallel_state, name, Group(1))
    dp = case.get("dp", 1)  # data parallelism: rank 0 of dp groups, experts over tp * dp ranks with EP
    parallel_state._DP = Group(dp)
    if case.get("ep"):
        parallel_state._EP = Group(tp * dp)
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    # as vLLM's model loader builds it (initialize_model hands the quant config the model's
    # packed_modules_mapping and weights mapper): the model dtype the default
    with set_default_torch_dtype(config.model_config.dtype), torch.device("meta"):
        cls, architecture = get_model_architecture(config.model_config)
        model = initialize_model(vllm_config=config)
    from vllm_bridge.engine.from_vllm import _hf_config_dict

    # the config.json as `--from-vllm` and the plugin hand it to planner/engine/hf
    hf_config = json.loads(json.dumps(_hf_config_dict(config.model_config), default=str))
    return {"architecture": architecture, "class": cls.__name__, "hf_config": hf_config, **read(model)}


def quant_of(module) -> str:
    """A layer's quant method, in words: its class, a compressed-tensors layer's scheme (and the
    weights' strategy), block FP8, and the mixed-precision kernel chosen for it."""
    method = module.quant_method
    name = type(method).__name__
    scheme = getattr(module, "scheme", None)
    if scheme is not None:
        name += "/" + type(scheme).__name__
        strategy = getattr(scheme, "strategy", None)
        if strategy is not None:
            name += f"/{getattr(strategy, 'value', strategy)}"
    if getattr(method, "block_quant", False):
        name += "/block"
    kernel = getattr(method, "kernel", None)
    if kernel is not None:
        name += f"/{type(kernel).__name__}"
    return name


def moe_block_shape(module) -> list | None:
    """The scale blocks block-FP8 experts run with: Fp8MoEMethod.moe_block_shape where the release
    adapts the checkpoint's blocks to the tensor-parallel shard (0.33.0's
    resolve_fp8_moe_weight_block_shape), else the checkpoint's weight_block_size; None: not block FP8."""
    method = module.quant_method
    block = getattr(method, "moe_block_shape", None) or getattr(method, "weight_block_size", None)
    return None if block is None else [int(b) for b in block]


def moe_backend(module) -> str | None:
    """The FP8 MoE backend vLLM selected for block-FP8 experts (Fp8MoEMethod.fp8_backend, 0.33.0's
    select_fp8_moe_backend); None where the method has none."""
    backend = getattr(module.quant_method, "fp8_backend", None)
    return None if backend is None else str(getattr(backend, "value", backend))


def attention_of(module) -> list:
    """heads, KV heads, head size, scale, soft cap, sliding window, backend, sinks."""
    impl = module.impl
    window = getattr(module, "sliding_window", None)
    backend = module.attn_backend.get_name() if hasattr(module, "attn_backend") else None
    return [module.num_heads, module.num_kv_heads, module.head_size, float(impl.scale),
            float(getattr(impl, "logits_soft_cap", None) or 0.0), window, backend,
            getattr(impl, "sinks", None) is not None]


def read(model) -> dict:
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    linears, moes, attention, heads = [], [], [], []
    for name, module in model.named_modules():
        if isinstance(module, LinearBase):
            # ReplicatedLinear has no partition sizes: it is whole on every rank
            n = getattr(module, "output_size_per_partition", module.output_size)
            k = getattr(module, "input_size_per_partition", module.input_size)
            linears.append([name, type(module).__name__, n, k, quant_of(module)])
        elif isinstance(module, VocabParallelEmbedding):  # the LM head, or the embedding a tied head reuses
            kind = "lm_head" if isinstance(module, ParallelLMHead) else "embedding"
            heads.append([name, kind, module.num_embeddings_per_partition, module.embedding_dim])
        elif hasattr(module, "local_num_experts") and hasattr(module, "intermediate_size_per_partition"):
            moes.append([name, module.local_num_experts, module.top_k, module.hidden_size,
                         module.intermediate_size_per_partition, quant_of(module), moe_block_shape(module),
                         moe_backend(module)])
        elif all(hasattr(module, a) for a in ("impl", "num_heads", "head_size")):  # Attention, MLAAttention
            attention.append([name, *attention_of(module)])
    # the Transformers modeling backend keeps its Attention layers beside the module tree
    for index, module in sorted(getattr(model, "attention_instances", {}).items()):
        attention.append([f"attention_instances.{index}", *attention_of(module)])
    return {"linears": linears, "moes": moes, "attention": attention, "vocab": heads,
            "children": [name for name, _ in model.named_children()]}


if __name__ == "__main__":
    main()
