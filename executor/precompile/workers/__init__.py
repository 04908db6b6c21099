"""The precompile pool's worker processes: how each starts, runs a job and ends.

    setup.py          what a worker takes from the main process: its settings, the GPU target
    gpu.py            the GPUs as NVML names them (no CUDA context)
    backend_classes.py  the class a worker runs each backend with (its compile-only twin), what it imports
    triton_costs.py   Triton's fixed per-process costs, paid early
    worker.py         a worker's state, and one job run in it
    device.py         a worker's current device, and its memory freed after each job
    lanes.py          the workers in two lanes: with a CUDA context (device) and without (compile)
    processes.py      one lane's worker processes: started early, ended, joined or killed
    process_tree.py   ending processes with what they started (ninja, nvcc)
    build_ahead.py    FlashInfer's modules built ahead, in a process of their own (python -m)
    build_ahead_command.py  that process's command line, for its starter
"""
