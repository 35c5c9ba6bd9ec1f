"""The engine: the processes that stay up (one verifier, a pool of draft workers) and the jobs they run.

``engine.Engine`` is the public API (``specsched.Engine``), holding ``job_checks`` (what a job must pass);
``dispatcher`` is its thread, which owns every socket and holds its parts: ``inbox`` (what other threads
hand it, and its held start), ``reports`` (what the children say), ``supervisor`` (restarts), ``liveness``
(heartbeats), ``admission``, ``endings`` (how a job ends), ``joining`` (workers from other hosts) and
``orders`` (what it tells the children); ``process_table`` the children, which ``zygote`` forks; ``jobs`` a
job from submission to record; ``stopping`` the command line's Ctrl-C and SIGTERM.
"""
