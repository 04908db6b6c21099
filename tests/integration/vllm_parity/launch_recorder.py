"""What the oracles (sampler_oracle.py, fused_moe_oracle.py) put in place of a Triton kernel:
a recorder of its launches, each by parameter name, its values as `describe` gives them."""

from __future__ import annotations


class Recorder:
    """Stands in for the JITFunction at ``kernel[grid](...)``: keeps the launch by parameter name."""

    def __init__(self, arg_names: list, describe):
        self.arg_names, self.describe, self.launches = arg_names, describe, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            named = dict(zip(self.arg_names, args), **kwargs)
            self.launches.append({name: self.describe(value) for name, value in named.items()})
        return launch
