"""What every process of a run does for itself, whoever started it (the zygote, a draft worker starting its
lane processes): take a name that `ps` and `top` show, and die with its parent."""

from __future__ import annotations

import ctypes
import signal

import setproctitle


def set_title(text: str) -> None:
    """The name `ps`/`top` show (setproctitle rewrites argv)."""
    setproctitle.setproctitle(text)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the thread that spawned it ends (PR_SET_PDEATHSIG). The caller
    still checks its parent once after (it may have died before this took effect) and in its wait loops."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the parent checks in every wait loop still end the process
