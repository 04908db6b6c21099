"""Run in vLLM 0.25.0's environment (FlashInfer 0.6.13): where FlashInfer's own code puts its
JIT workspace and its AOT directory, and what its own loader does with a module placed in the AOT
directory. Reads {"aot": DIR} on stdin (DIR holds the placed modules), prints JSON."""

import json
import os
import sys
import types

from executor.caches import flashinfer_jit as fim


def main() -> None:
    request = json.load(sys.stdin)
    from flashinfer.jit import core
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.sampling import gen_sampling_module

    out = {"flashinfer": {"jit": str(jit_env.FLASHINFER_JIT_DIR), "aot": str(jit_env.FLASHINFER_AOT_DIR)},
           "ours": {"jit": fim.jit_dir([], os.environ), "aot": fim.aot_dir()}}
    jit_env.FLASHINFER_AOT_DIR = type(jit_env.FLASHINFER_AOT_DIR)(request["aot"])  # the placement under test
    built = []

    def build(self, verbose, need_lock=True):  # FlashInfer's ninja step: must not run
        built.append(self.name)

    core.JitSpec.build = build
    core.tvm_ffi = types.SimpleNamespace(load_module=lambda path: ("loaded", path))  # no GPU: record the load
    spec = gen_sampling_module()
    out["is_aot"] = spec.is_aot
    out["loaded"] = spec.build_and_load()[1]
    out["built"] = built
    out["workspace_library"] = os.path.exists(spec.jit_library_path)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
