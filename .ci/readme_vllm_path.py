"""Run every command of the vLLM path ("For vLLM users: four steps") that needs no GPU, as
written there, on the installed `warmup` (issue 37: the README's vLLM path run by CI on a plain
install). The section is in README.md (its short form) and in docs/getting-started.md (in full,
issue 55 item 5): each file given must have it, and each distinct command runs once.

Usage: python3 .ci/readme_vllm_path.py README.md docs/getting-started.md [--vllm-path PATHS]

A command's expected exit code is the page's own `# exit N` comment, else 0. Placeholders are
the pages': /models/Llama-3.1-8B-FP8 becomes a directory holding the Llama fixture's config.json,
/path/to/vllm/.../configs the configs directory of the vLLM in --vllm-path. Skipped, and said:
`vllm serve` (a GPU), `warmup bundle build` (a GPU), `install`, `push` and `pull` (its bundle), and the commands
that need vLLM itself (`--from-vllm`, the MoE tables) when --vllm-path is not given.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "For vLLM users: four steps"  # a heading of any level
MODEL = "/models/Llama-3.1-8B-FP8"
MOE_CONFIGS = "/path/to/vllm/model_executor/layers/fused_moe/configs"


def commands(page: str, name: str = "the page") -> list[str]:
    """The section's bash blocks, one command per logical line (continuations joined); the section
    runs from its heading to the next heading of the same or a higher level (outside code blocks)."""
    lines, start, level, fenced = page.splitlines(keepends=True), None, 0, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if heading and start is None and heading.group(2).strip() == SECTION:
            start, level = i + 1, len(heading.group(1))
        elif heading and start is not None and len(heading.group(1)) <= level:
            lines = lines[:i]
            break
    if start is None:
        raise SystemExit(f"{name} has no '{SECTION}' section")
    text = "".join(lines[start:])
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        out += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return out


def why_skipped(command: str, vllm_path: str | None) -> str | None:
    if "vllm serve" in command:
        return "starts vLLM on a GPU"
    if command.startswith(("warmup bundle build", "warmup bundle install")):
        return "builds on a GPU, or installs what a GPU built"
    if command.startswith(("warmup bundle push", "warmup bundle pull")):
        return "pushes what a GPU built to a registry, or pulls it (tests/executor/test_bundle_oci.py runs both)"
    if ("--from-vllm" in command or MOE_CONFIGS in command) and not vllm_path:
        return "needs vLLM installed (--vllm-path)"
    return None


def expected_exit(command: str) -> int:
    found = re.search(r"#\s*exit (\d+)", command)
    return int(found.group(1)) if found else 0


def run(command: str, model_dir: str, vllm_path: str | None) -> int:
    """The command as the page writes it, in the scratch directory beside the model (its -o lands there)."""
    line = command.split("#", 1)[0].replace(MODEL, model_dir)
    env = dict(os.environ)
    if vllm_path:
        env["PYTHONPATH"] = vllm_path
        configs = [os.path.join(p, "vllm", "model_executor", "layers", "fused_moe", "configs")
                   for p in vllm_path.split(os.pathsep)]
        line = line.replace(MOE_CONFIGS, next((c for c in configs if os.path.isdir(c)), MOE_CONFIGS))
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return subprocess.run(words, env=env, cwd=os.path.dirname(model_dir)).returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pages", nargs="+", help="README.md and the docs pages that hold the section")
    parser.add_argument("--vllm-path", help="a sys.path holding vLLM (tests/integration/vllm_parity/setup_vllm.sh's)")
    args = parser.parse_args()
    found = []
    for name in args.pages:
        with open(name, encoding="utf-8") as f:
            found += [c for c in commands(f.read(), name) if c not in found]
    work = tempfile.mkdtemp(prefix="readme-vllm-path-")
    model_dir = os.path.join(work, "Llama-3.1-8B-FP8")
    os.makedirs(model_dir)
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json"),
                os.path.join(model_dir, "config.json"))
    failed, ran = [], 0
    for command in found:
        why = why_skipped(command, args.vllm_path)
        if why:
            print(f"skipped ({why}): {command}")
            continue
        code = run(command, model_dir, args.vllm_path)
        ran += 1
        if code != expected_exit(command):
            failed.append(f"exit {code}, expected {expected_exit(command)}: {command}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"vLLM path ({', '.join(args.pages)}): {ran} commands ran, {len(failed)} failed")
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
