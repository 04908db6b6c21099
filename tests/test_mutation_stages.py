"""Stage rules a mutation pass found untested (issue 44 item 7): the CUDA-graph sizes vLLM captures
in interactivity mode (VllmConfig._set_cudagraph_sizes: every size from 1 to 32, then vLLM's grid), and
none past the capture ceiling."""

from __future__ import annotations

from planner.plan.stages.cudagraph import default_sizes


def test_interactivity_captures_every_size_up_to_32_then_the_grid():
    assert default_sizes(512, 8192, "interactivity") == [*range(1, 33), *range(40, 256, 8), *range(256, 513, 16)]


def test_interactivity_below_32_captures_every_size_up_to_the_ceiling():
    assert default_sizes(20, 8192, "interactivity") == [*range(1, 21)]


def test_no_size_past_the_capture_ceiling_is_captured():
    assert default_sizes(15, 8192, "throughput") == [1, 2, 4, 8]
    assert default_sizes(263, 8192, "throughput") == [1, 2, 4, *range(8, 256, 8), 256]
