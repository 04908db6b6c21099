"""Where the built-in plans, engine configs and schemas live.

An installed wheel carries them under ``planner/_data`` (pyproject's force-include);
a checkout or an editable install finds them at the repository root.
"""

from __future__ import annotations

import os

from .errors import PlanError

_HERE = os.path.dirname(os.path.abspath(__file__))


def _root(name: str) -> str:
    installed = os.path.join(_HERE, "_data", name)
    if os.path.isdir(installed):
        return installed
    return os.path.join(os.path.dirname(_HERE), name)


def plans_dir() -> str:
    return _root("plans")


def engines_dir() -> str:
    return os.path.join(plans_dir(), "engines")


def schema_path(name: str) -> str:
    return os.path.join(_root("schemas"), f"{name}.schema.json")


def builtin_plans() -> list[str]:
    """Names of the built-in plans (plans/*.yaml), sorted."""
    return sorted(f[:-5] for f in os.listdir(plans_dir()) if f.endswith(".yaml"))


def builtin_engines() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(engines_dir()) if f.endswith(".yaml"))


def resolve(name_or_path: str, kind: str) -> str:
    """A built-in name (``vllm``, ``deepseek-v3-fp8-tp8-h200``) or a path -> a path.

    A path is anything with a separator or a YAML suffix; it is returned as given so
    that errors name the file the user typed.
    """
    if os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        return name_or_path
    folder = plans_dir() if kind == "plan" else engines_dir()
    candidate = os.path.join(folder, name_or_path + ".yaml")
    if os.path.isfile(candidate):
        return candidate
    if os.path.exists(name_or_path):
        return name_or_path
    known = builtin_plans() if kind == "plan" else builtin_engines()
    raise PlanError(f"no built-in {kind} named {name_or_path!r} and no such file; built-in: {', '.join(known)}",
                    file=name_or_path)
