"""The engine: the processes that stay up (one verifier, a pool of draft workers) and the jobs they run.

``engine.Engine`` is the public API (``specsched.Engine``); ``dispatcher`` is its thread, which owns
every socket; ``process_table`` the children, which ``zygote`` forks; ``jobs`` a job from submission
to record.
"""
