"""Output paths are checked before any work starts: a run must not end by failing to write its record."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...core.config import ConfigError

FILE_OUTPUTS = ("json", "trace", "markdown", "chrome", "reliability", "out")  # and export's --svg
DIR_OUTPUTS = ("plots",)
SVG_FOLDERS = ("compare", "whatif")  # commands whose --svg is a folder of charts, not one chart


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse (ConfigError) an output file or folder the command could not write when it ends."""
    files = [f for f in FILE_OUTPUTS if getattr(args, f, None) is not None]
    dirs = [f for f in DIR_OUTPUTS if getattr(args, f, None) is not None]
    if getattr(args, "svg", None) is not None:
        (dirs if getattr(args, "command", None) in SVG_FOLDERS else files).append("svg")
    for name in files + dirs:
        if not str(getattr(args, name)):
            raise ConfigError(f"--{name} is empty; give a {'folder' if name in dirs else 'file'} name")
    for name in files:
        path, flag = Path(getattr(args, name)), "--" + name
        if path.is_dir() or str(getattr(args, name)).endswith("/"):
            raise ConfigError(f"{flag} {path} is a folder; give a file name")
        if not path.parent.is_dir():
            raise ConfigError(f"{flag} {path}: folder {path.parent} does not exist")
        if not os.access(path if path.exists() else path.parent, os.W_OK) or not _opens(path):
            raise ConfigError(f"{flag} {path} is not writable")
    for name in dirs:  # an output folder is made now, so a run cannot end by failing to make it
        path, flag = Path(getattr(args, name)), "--" + name
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{flag} {path} is a file; give a folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot create this folder ({exc.strerror})") from None
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{flag} {path} is not writable")
    inputs = {Path(p).resolve(): what for what, p in _inputs(args)}
    written: dict[Path, str] = {}
    for name in files:
        path = Path(getattr(args, name)).resolve()
        if path in inputs:
            raise ConfigError(f"--{name} {getattr(args, name)} would overwrite {inputs[path]}")
        if path in written and not path.is_char_device():  # /dev/null, twice, loses nothing
            raise ConfigError(f"--{name} and {written[path]} name the same file {getattr(args, name)}: "
                              "give each output its own")
        written[path] = f"--{name}"


def _inputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(what, path) of the files the command reads: the trace of replay/export/whatif, a workload, a task's data,
    a corpus cache, keys, policy files."""
    reads = "the record it reads" if getattr(args, "command", None) == "rerun" else "the trace it reads"
    found = [(reads, args.path)] if getattr(args, "path", None) else []
    read = [(f"--{name.replace('_', '-')}", getattr(args, name)) for name in ("workload", "data", "corpus_cache")
            if getattr(args, name, None) not in (None, "auto", "off")]
    if keys := getattr(args, "keys", None):  # a folder of keys, or the engine's key file
        read += [("--keys", Path(keys) / name) for name in ("engine.key", "worker.key")] if Path(keys).is_dir() \
            else [("--keys", keys)]
    policies = [getattr(args, "policy", None) or "", *(getattr(args, "policies", None) or [])]
    read += [("--policy", p.rpartition(":")[0]) for p in policies if p.rpartition(":")[0].endswith(".py")]
    return found + [(f"the file {flag} reads", path) for flag, path in read]


def _opens(path: Path) -> bool:
    """Whether the file can be opened for writing (os.access says yes to root everywhere, /proc included); a
    file made by asking is removed again, one that was there is left as it was."""
    if path.is_char_device():
        return _takes_writes(path)
    if os.path.lexists(path) and not path.is_file():  # a FIFO (opening it would block, or end its reader
        return True                                  # early), a dangling link: os.access decides
    try:
        if path.exists():
            with open(path, "a"):
                return True
        with open(path, "x"):
            pass
        path.unlink()
        return True
    except OSError:
        return False


def _takes_writes(device: Path) -> bool:
    """Whether a character device takes a write of zero bytes: /dev/full refuses even that (ENOSPC), /dev/null
    and a terminal take it, and nothing reaches them. Opened without blocking, and without making a terminal
    this process's controlling one."""
    try:
        fd = os.open(device, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        os.write(fd, b"")
        return True
    except BlockingIOError:  # a device that is busy now may take the record when the run ends
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
