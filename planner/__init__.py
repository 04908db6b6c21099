"""warmup-planner: expand a YAML warmup plan plus an engine config into explicit steps.

The planner is pure Python: it never imports torch, triton or the executor, so a
plan can be made, diffed and reviewed on any laptop.
"""

__version__ = "0.1.0"
