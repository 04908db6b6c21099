"""Kernel dispatch models: which compiled variant a call hits, in pure Python.

A JIT kernel compiles once per *compile key*: for a Triton kernel, the launch config
chosen for the call plus the specialization class of every integer argument and its
constexprs; for DeepGEMM, the kernel configuration its heuristic picks for the
device. The planner enumerates keys over a declared range and plans one call per
key (`exact` mode); the executor launches through the same functions, so planned and
launched keys cannot drift apart. Nothing here imports torch, triton or the executor.
"""
