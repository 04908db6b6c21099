"""Kernel backends: each a module behind one protocol (executor.backends.base.Backend).

Importing a backend module never imports torch, triton or the library it wraps;
``available()`` says whether it can run here, and why not.
"""
