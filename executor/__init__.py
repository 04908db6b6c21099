"""warmup-planner executor: replays an expanded plan on the GPU and proves what compiled.

Importing this package is cheap and never imports torch or triton: backends and
kernels load lazily, and an optional backend that is missing makes its steps
`unavailable` instead of failing at import.
"""
