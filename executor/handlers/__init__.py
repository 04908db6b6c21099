"""Step handlers: one small module per step kind (or family of kinds).

A handler is ``handle(step, ctx) -> dict`` with at least ``kernel_calls`` and
``backend``; it raises ``Unavailable`` / ``Skipped`` (executor.backends.base) for
those statuses and anything else for `failed`. executor.registry maps kinds to them.
"""
