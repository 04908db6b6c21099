"""vLLM's torch.compile cache: ``$VLLM_CACHE_ROOT/torch_compile_cache``.

- Lives in: vLLM names its directories by a hash of the compile factors, ``VllmConfig.compute_hash()``,
  the traced code and the compiler (vllm/compilation/backends.py), none of which is a path: the same
  start-up on another machine computes the same names. Its AOT artifacts (VLLM_USE_AOT_COMPILE, on
  by default from torch 2.10) are ``torch_aot_compile/<hash>/``, with Inductor's cache inside
  (vllm/compilation/decorators.py points TORCHINDUCTOR_CACHE_DIR there, so Inductor's Triton kernels
  are in it too).
- Packs: every file.
- Relocates: ``<hash>/rank_<r>_<dp>/<prefix>/vllm_compile_cache.py`` is a Python literal, read with
  ``ast.literal_eval``, that gives each compiled graph a ``graph_handle`` (key, path). vLLM 0.25's
  InductorStandaloneAdaptor.load opens ``path``, the building machine's absolute path (0.33 opens
  ``<the file's directory>/<key>``: vLLM PR #52142): the path is moved to this machine's root and the
  file written back as vLLM writes it (pprint). Triton entries inside: executor/caches/triton.py.
  torch's artifacts (``artifact_compile_range_*``, the AOT ``model``) and Inductor's FX graph and
  AOTAutograd entries pickle each kernel's autotuner with the absolute path of its ``.best_config``,
  which Inductor opens: moved (executor/caches/torch_artifacts.py; other strings that mention a path,
  repro scripts and generated code, are text and stay). Every other file that names a building path
  names it for people or debugging: Inductor's generated code in "kernel path" comments, vLLM's
  ``computation_graph.py``, ``transformed_code.py`` and ``cache_key_factors.json`` (written for
  people; vLLM's loader opens none of them).
- Checks: each entry of a compile cache must name an artifact that is here, at ``<dir>/<key>``, and
  whole (executor/caches/checks.py): vLLM 0.25 does not catch a missing or cut one, and its engine
  core exits. An entry that fails is taken out of the file (vLLM compiles that graph itself).
- Is used: vLLM reads the compile cache and the artifacts; a graph compiled again writes a directory
  under another hash. The JIT monitor counts Dynamo's frame compiles.
- Is watched (``DynamoWatcher``): through Dynamo's compile-start callback, once the process has
  imported ``torch._dynamo`` (the monitor imports nothing the process has not).
"""

from __future__ import annotations

import ast
import os
import pprint
import re
import sys
import types

from . import checks, inductor, roots, triton
from .family import Counter, Family, Monitored, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place_tree
from .watcher import Watcher

COMPILE_CACHE = "vllm_compile_cache.py"
STANDALONE = "inductor_standalone"  # vLLM's InductorStandaloneAdaptor.name: the compiler whose handles name files
FOR_PEOPLE = ("computation_graph.py", "transformed_code.py", "cache_key_factors.json")
ARTIFACT = re.compile(r"(^|/)(artifact_compile_range_[^/]*|torch_aot_compile/[^/]+/rank_[^/]+/model)$")


def root(env: roots.Env) -> str:
    return os.path.join(env.vllm_cache_root, "torch_compile_cache")


def read_compile_cache(text: str) -> dict:
    """vLLM's compile cache file (ValueError, SyntaxError: not one)."""
    cache = ast.literal_eval(text)
    if not isinstance(cache, dict):
        raise ValueError("not a dict")
    return cache


def format_compile_cache(cache: dict) -> str:
    """As vLLM writes it (CompilerManager.save_to_file)."""
    return pprint.PrettyPrinter(indent=4).pformat(cache)


def handle_of(value) -> tuple | None:
    handle = value.get("graph_handle") if isinstance(value, dict) else None
    ok = isinstance(handle, tuple) and len(handle) == 2 and all(isinstance(h, str) for h in handle)
    return handle if ok else None


def rewrite_compile_cache(data: bytes, relocation, final: str) -> bytes:
    """Each handle's path moved to this machine; a path the relocation cannot place stays as it is
    (the check after placement then takes that entry out)."""
    cache = read_compile_cache(data.decode("utf-8"))
    for value in cache.values():
        handle = handle_of(value)
        moved = relocation.moved(handle[1]) if handle else None
        if moved:
            value["graph_handle"] = (handle[0], moved)
    return format_compile_cache(cache).encode("utf-8")


def _named(*names):
    return lambda rel, path: os.path.basename(rel) in names


PATHS = (
    PathRule(_named(COMPILE_CACHE), rewrite_compile_cache, "vLLM opens each graph's artifact at the path it lists"),
    *triton.ENTRY_RULES,
    PathRule(_named(*FOR_PEOPLE), None, "vLLM writes it for people; its loader does not open it"),
    PathRule(lambda rel, path: bool(ARTIFACT.search(rel)), inductor.rewrite_pickled,
             "torch's artifact: Inductor opens the paths its pickled objects hold"),
    PathRule(lambda rel, path: "inductor_cache/" in rel and inductor.is_entry(rel.split("inductor_cache/", 1)[1]),
             inductor.rewrite_pickled, inductor.ENTRY_WHY),
    PathRule(lambda rel, path: "inductor_cache/" in rel and inductor.in_layout(rel.split("inductor_cache/", 1)[1]),
             None, inductor.WHY),
)


def compile_cache_problems(path: str) -> tuple[dict | None, list[str]]:
    """(the cache with only the entries vLLM can load, the lines for those taken out); (None, [why])
    when the file itself is not a compile cache vLLM can read."""
    try:
        with open(path, encoding="utf-8") as f:
            cache = read_compile_cache(f.read())
    except (OSError, UnicodeDecodeError, ValueError, SyntaxError, MemoryError, RecursionError) as e:
        return None, [f"not a compile cache vLLM can read ({type(e).__name__})"]
    folder, kept, lines = os.path.dirname(path), {}, []
    for key, value in cache.items():
        why = _entry_problem(folder, key, value)
        if why:
            lines.append(f"graph {key!r}: {why}")
        else:
            kept[key] = value
    return kept, lines


def _entry_problem(folder: str, key, value) -> str | None:
    compiler = key[2] if isinstance(key, tuple) and len(key) == 3 else None
    if compiler != STANDALONE:
        return None  # its handle names no file vLLM opens (InductorAdaptor keys Inductor's cache by hash)
    handle = handle_of(value)
    if handle is None:
        return None  # vLLM treats an unreadable entry as outdated and compiles it again
    artifact = os.path.join(folder, handle[0])
    if os.path.normpath(handle[1]) != artifact:
        return f"its artifact is at {handle[1]}, outside this cache (vLLM 0.25 would open it there)"
    if not os.path.exists(artifact):
        return f"its artifact {handle[0]} is not here"
    return checks.torch_artifact_problem(artifact)


def check(root_dir: str, path: str) -> list[Unresolved]:
    if os.path.basename(path) == COMPILE_CACHE:
        return _check_compile_cache(path)
    return triton.entry_check(path) or checks.file_check(root_dir, path)


def _check_compile_cache(path: str) -> list[Unresolved]:
    """The entries vLLM would fail on, one Unresolved each: taken out of the file here, or, when none
    is left or the file cannot be read at all, the file removed with them."""
    kept, lines = compile_cache_problems(path)
    if kept is None:
        return [Unresolved(path, lines[0])]
    if lines and kept:
        tmp = f"{path}.warmup-checked"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(format_compile_cache(kept))
        os.replace(tmp, path)
        return [Unresolved(path, line, removes=False) for line in lines]
    return [Unresolved(path, line) for line in lines]


def collect(root_dir: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root_dir, "torch_compile"), []


def place(p: Placing) -> Placed:
    return place_tree(p.staged, p.dest, p.move)


class DynamoWatcher(Watcher):
    """torch.compile: Dynamo calls us at the start of every frame compile (and recompile)."""

    library = "torch._dynamo"

    def _attach(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # noqa: BLE001 - older torch: no callback to register
            self.monitor.watch("torch.compile(counters)")
            return

        def on_start(*_args, **_kw):
            m = self.monitor
            m.count("dynamo_compiles")
            if m.sealed:  # the stack is read only for what a user must be told
                m.post_seal({"backend": "torch.compile", **compiling_frame(sys._getframe())})

        callback_handler.register_start_callback(on_start)
        self.restore.append(lambda: callback_handler.remove_start_callback(on_start))
        self.monitor.watch("torch.compile")


def compiling_frame(frame) -> dict:
    """The event of the function Dynamo is compiling, read from the stack its start callback runs on:
    convert_frame's ``_compile(code, ...)`` holds the code object, and a cache entry where the
    function has graphs already (a recompile: the guards of every one failed). Where the stack does
    not show it (another torch), the event says only that a frame compiled."""
    while frame is not None:
        code = frame.f_locals.get("code") if frame.f_code.co_name == "_compile" else None
        if isinstance(code, types.CodeType) and frame.f_code.co_filename.endswith("convert_frame.py"):
            again = frame.f_locals.get("cache_entry") is not None
            where = f"{code.co_filename}:{code.co_firstlineno}"
            return {"event": "dynamo recompile" if again else "dynamo compile", "kernel": code.co_name,
                    "repr": f"({where}; TORCH_LOGS=recompiles names the guard that failed)" if again else f"({where})"}
        frame = frame.f_back
    return {"event": "dynamo compile", "kernel": "torch.compile frame"}


FAMILY = Family(
    name="torch_compile", label="torch.compile", root=root, collect=collect, place=place, paths=PATHS,
    check=check, monitor=Monitored("torch_compile", "torch.compile", "torch.compile", "dynamo_compiles",
                                   counters=(Counter("dynamo_compiles"),),  # frames compiled (first compiles and recompiles)
                                   watcher=DynamoWatcher, order=1))
