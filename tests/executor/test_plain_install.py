"""What a plain `pip install .` (no numpy, torch or triton) can run: `warmup execute --dry-run`
is documented to need no GPU (issue 37: it ended in `ModuleNotFoundError: numpy`, exit 3)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# numpy, torch and triton made unimportable, as on a plain install (None in sys.modules: ImportError)
HIDDEN = ("import sys\n"
          "for name in ('numpy', 'torch', 'triton'):\n"
          "    sys.modules[name] = None\n"
          "from planner.cli import main\n"
          "sys.exit(main(sys.argv[1:]))\n")


def test_execute_dry_run_needs_none_of_the_gpu_libraries(tmp_path):
    for extra in ([], ["--allow-missing"]):
        done = subprocess.run([sys.executable, "-c", HIDDEN, "execute", "vllm-0.33", "--engine",
                               "llama-3.1-8b-fp8-h100", "--dry-run", *extra],
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "internal error" not in done.stdout + done.stderr and "status: ok" in done.stdout
