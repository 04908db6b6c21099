"""Claims: each compile key compiled once by the processes that share a cache (issue 28).

    on_disk.py     a key's claims on disk: their layout and bounds, and what one look at them finds
    owner.py       a worker's side: taking a claim before its job, the heartbeat, the done mark
    key_future.py  a key's future, the same across the jobs that warm it
    waits.py       the main process waiting for keys other processes compile, and the takeovers
    node.py        where a run's claims live (the caches it shares with other processes), its counts
"""
