"""vLLM's own compile cache, written and read on CPU by one installed vLLM release (issue 43 item 3).

    python compile_cache_probe.py build CACHE_DIR   # compile a small graph with vLLM's CompilerManager
    python compile_cache_probe.py load CACHE_DIR... # read each cache as vLLM's loader does, in this order

Run by tests/integration/vllm_parity/test_compile_cache_relocation.py with the release on PYTHONPATH and
TORCHINDUCTOR_CACHE_DIR set. ``build`` is vLLM's InductorStandaloneAdaptor writing an artifact and
``vllm_compile_cache.py`` (a graph handle with the artifact's absolute path, as vLLM 0.25 writes it);
``load`` is vLLM's CompilerManager.initialize_cache then load for each directory, whatever it raises
reported, and a loaded graph's output compared with torch's eager result (the caller puts the one
expected to load last: nothing before it has loaded a graph into this process). One JSON value on
the last line.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

import torch

os.environ.setdefault("VLLM_USE_MEGA_AOT_ARTIFACT", "0")  # what torch 2.11 (the GPU machine's) gives vLLM 0.25


def graph():
    def f(x, y):
        return torch.relu(x @ y) + 1

    torch.manual_seed(0)
    return f, torch.fx.symbolic_trace(f), [torch.randn(4, 8), torch.randn(8, 3)]


def manager():
    from vllm.compilation.backends import CompilerManager
    from vllm.config import CompilationConfig

    config = CompilationConfig()
    if "use_aot_compile" in inspect.signature(CompilerManager.__init__).parameters:
        return CompilerManager(config, use_aot_compile=True), config  # 0.33: the cache file is read only then
    return CompilerManager(config), config


def build(cache_dir: str) -> dict:
    from vllm.config.utils import Range

    f, gm, inputs = graph()
    os.makedirs(cache_dir, exist_ok=True)
    cm, config = manager()
    cm.initialize_cache(cache_dir)
    compiled = cm.compile(gm, inputs, {}, config, Range(1, 8), graph_index=0)
    cm.save_to_file()
    return {"files": sorted(os.listdir(cache_dir)), "matches": bool(torch.allclose(compiled(*inputs), f(*inputs)))}


def load(cache_dir: str) -> dict:
    from vllm.config.utils import Range

    f, gm, inputs = graph()
    cm, _ = manager()
    try:
        cm.initialize_cache(cache_dir)
        loaded = cm.load(gm, inputs, 0, Range(1, 8))
    except Exception as e:  # noqa: BLE001 - what vLLM would not survive: reported, the test judges it
        return {"error": f"{type(e).__name__}: {e}"}
    if loaded is None:
        return {"loaded": False}
    return {"loaded": True, "matches": bool(torch.allclose(loaded(*inputs), f(*inputs)))}


if __name__ == "__main__":
    import contextlib
    import io

    action, where = sys.argv[1], sys.argv[2:]
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        out = build(where[0]) if action == "build" else [load(d) for d in where]
    print(json.dumps(out))
