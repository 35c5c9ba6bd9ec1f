"""Folders and files named for the process that made them, and the removal of those whose process is dead.

A run's socket folder (``specsched-PID.NS-xxxxxxxx`` in the temp directory) and a model being built in the
cache (``.partial-PID.NS-...``) are removed by their process as it ends; one killed by SIGKILL cannot, so the
next process to make one removes those of processes that are gone. The name carries the owner's pid and its
pid namespace: a pid is asked about only in the namespace that numbered it (a container sharing /tmp numbers
its processes apart), so a live process's folder is never removed.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import psutil


def owned(prefix: str) -> str:
    """`prefix`, this process's pid and pid namespace: the start of a name that remove_dead reads back."""
    return f"{prefix}{os.getpid()}.{_pid_namespace()}-"


def remove_dead(where: Path, prefix: str) -> None:
    """Remove what `where` holds under an owned(prefix) name of a process that no longer runs."""
    named = re.compile(re.escape(prefix) + r"(\d+)\.(\d+)-")
    here = _pid_namespace()
    try:
        entries = list(os.scandir(where))
    except OSError:  # not made yet, or not ours to read: nothing of ours to remove
        return
    for entry in entries:
        owner = named.match(entry.name)
        if owner is None or int(owner[2]) != here or psutil.pid_exists(int(owner[1])):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:  # another process removing it at the same time
            pass


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc (not Linux): one namespace
        return 0
