"""Where vLLM's tuned fused_moe tables are read from, and the ones one plan expansion read.

vLLM's Triton fused_moe picks a config per token count from a tuned table it ships
(``vllm/model_executor/layers/fused_moe/configs``), preferring a same-named file in
``$VLLM_TUNED_CONFIG_FOLDER``. The planner carries none of them; it reads them where vLLM keeps
them, in this order:

1. ``$WARMUP_VLLM_MOE_CONFIGS``: a directory of vLLM's tables (that of the vLLM that serves, when
   the plan is made elsewhere); set but empty means "none" (what the golden tests pin);
2. else the configs directory of the vLLM this Python would import, found without importing it
   (``importlib.util.find_spec`` reads no vLLM code; inside vLLM, the plugin's, the running one);
3. else none: the fused_moe stage plans no step and says so in the plan's not_modelled list.

With a directory, ``$VLLM_TUNED_CONFIG_FOLDER`` (when set) is searched before it, as vLLM does.
A layer with no file in either gets vLLM's default configs, as in vLLM. The plan records each
table file name it looked up with the digest of what it read (null: absent, the defaults) among
its inputs (planner.plan.digest), so the same tables give the same plan and other tables a stale one.
"""

from __future__ import annotations

import importlib.util
import os

from ..errors import PlanError
from ..hashing import digest

CONFIGS_ENV = "WARMUP_VLLM_MOE_CONFIGS"
USER_FOLDER_ENV = "VLLM_TUNED_CONFIG_FOLDER"
CONFIGS_IN_VLLM = ("model_executor", "layers", "fused_moe", "configs")
HOW = (f"set {CONFIGS_ENV} to the vllm/model_executor/layers/fused_moe/configs directory of the vLLM that "
       "serves, or make the plan in a Python where that vLLM is installed")


def installed_configs_dir() -> str | None:
    """The configs directory of the vLLM this Python would import, without importing it."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = os.path.join(root, *CONFIGS_IN_VLLM)
        if os.path.isdir(path):
            return path
    return None


def shipped_dir() -> str | None:
    """$WARMUP_VLLM_MOE_CONFIGS (empty: none), else the installed vLLM's, else None."""
    if CONFIGS_ENV not in os.environ:
        return installed_configs_dir()
    path = os.environ[CONFIGS_ENV]
    if path and not os.path.isdir(path):
        raise PlanError(f"{CONFIGS_ENV}={path!r} is not a directory; {HOW}, or set it empty for none",
                        file="environment")
    return path or None


def config_dirs() -> tuple:
    """The directories searched for a table, in vLLM's order; () when vLLM's are not known."""
    shipped = shipped_dir()
    if shipped is None:
        return ()
    user = os.environ.get(USER_FOLDER_ENV)
    return (user, shipped) if user else (shipped,)


class MoeTables:
    """The tables one plan expansion reads, each once: {file name: digest of its rows, or None}."""

    def __init__(self, dirs=None):
        self.dirs = config_dirs() if dirs is None else tuple(dirs)
        self.read: dict = {}
        self._rows: dict = {}

    def get(self, shape):
        """The layer's table rows, or None (defaults); PlanError naming a malformed file."""
        from kernel_model import vllm_fused_moe as moe

        name = moe.table_file_name(shape.num_experts, shape.intermediate, shape.device, shape.quant)
        if name not in self._rows:
            source = moe.TableDirs(self.dirs)
            try:
                self._rows[name] = source.table(shape)
            except moe.TableError as e:
                raise PlanError(f"unreadable vLLM fused_moe table: {e.reason}", file=e.file) from None
            self.read[name] = _digest(self._rows[name])
        return self._rows[name]


def _digest(rows):
    return None if rows is None else digest([[m, config] for m, config in rows])


def reread(names) -> dict:
    """The named tables read again now, where vLLM's tables are found now (stale-plan check)."""
    from kernel_model import vllm_fused_moe as moe

    source = moe.TableDirs(config_dirs())
    out = {}
    for name in sorted(names):
        path = source.find(name)
        try:
            out[name] = _digest(moe.read_table(path)) if path else None
        except moe.TableError as e:
            raise PlanError(f"unreadable vLLM fused_moe table: {e.reason}", file=e.file) from None
    return out
