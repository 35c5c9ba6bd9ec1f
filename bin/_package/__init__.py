"""specsched: scheduled speculative decoding run like an operating system runs processes.

The Python API: ``specsched.Engine`` (the processes that stay up and the jobs they run) and
``specsched.RunConfig`` (every setting of `specsched run`). Both load on first use, so
``python -m specsched`` and the children it starts pay for nothing they do not need.
"""

__version__ = "0.1.0"
__all__ = ["Engine", "Job", "RunConfig", "RunRecord"]


def __getattr__(name: str):
    if name in ("Engine", "Job"):
        from specsched.runtime.engine import engine

        return getattr(engine, name)
    if name == "RunConfig":
        from specsched.runtime.core.config import RunConfig

        return RunConfig
    if name == "RunRecord":
        from specsched.runtime.engine.record import RunRecord

        return RunRecord
    raise AttributeError(f"module 'specsched' has no attribute {name!r}")
