"""Start-up bundles inside vLLM: WARMUP_BUNDLE fetched and installed into the caches this process
reads, WARMUP_BUNDLE_OUT written after ready (the bundle format itself is executor/bundle/'s).

A floor of vllm_bridge's (tests/test_layers.py): it imports the base modules (settings, step_aside,
timeline), never warmup/ beside it or the entry modules above.

    startup.py   start-up bundles in vLLM's processes: WARMUP_BUNDLE installed, WARMUP_BUNDLE_OUT listed at ready
    source.py    WARMUP_BUNDLE as a file this process can install: which process pins, pulls, hands down, waits
    writer.py    a start-up bundle written after ready, beside vLLM, by a daemon thread
"""
