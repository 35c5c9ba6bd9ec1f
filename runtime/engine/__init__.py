"""The engine: the processes that stay up (one verifier, a pool of draft workers) and the jobs they run.

``engine.Engine`` is the public API (``specsched.Engine``), ``job_checks`` what a job must pass;
``dispatcher`` is its thread, which owns every socket (``held_start``: its start, ``endings``: how a job
ends, with ``admission``, ``reports``, ``supervisor``, ``joining``); ``process_table`` the children, which
``zygote`` forks; ``jobs`` a job from submission to record; ``stopping`` the command line's Ctrl-C and SIGTERM.
"""
