"""Sane bounds: a plan that would exceed them is refused before anything is built.

A warmup that schedules millions of requests or GEMM calls is a typo, not a plan,
and building it would only run the machine out of memory.
"""

MAX_REQUESTS_PER_STEP = 1 << 16      # synthetic requests in one batch
MAX_VALUES_PER_LIST = 1 << 20        # M-values, sizes, block ids, token ids in one list
MAX_TOTAL_VALUES = 1 << 23           # all integers of the expanded plan together
MAX_STEPS = 1 << 16
