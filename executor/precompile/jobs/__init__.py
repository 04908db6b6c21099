"""What the precompile pool compiles: the jobs of a plan, and which of them it needs to.

    job.py          a job, and what became of it (JobResult): the records passed between processes
    from_plan.py    the jobs of a plan: one per distinct (backend, compile key), at its first step and value
    manifest.py     the keys known to be in the disk caches, written after a run, read before the next
    fingerprint.py  what must match for the manifest's keys to still be there
    costs.py        each job's seconds at the last start: the longest run first
    decide.py       whether the run gets a pool, for which jobs, or why not (and --jobs' default)
"""
