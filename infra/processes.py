"""Which process is which: a pid with its start time, so that a reused pid is never taken for the original."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux); None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def this_process() -> dict:
    """What identifies this process: host, pid and the pid's start time."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}


def process_alive(record: dict | None) -> bool | None:
    """True or False for a process recorded on this host; None when it cannot be told (another host, no record)."""
    if not record or record.get("host") != socket.gethostname():
        return None
    ticks = start_ticks(int(record["pid"]))
    return ticks is not None and ticks == record.get("start_ticks")


SIGTERM_RECEIVED = False  # set by exit_on_sigterm: however the exception travels, the exit status stays 143


def exit_on_sigterm(signum=None, frame=None) -> None:
    """SIGTERM handler of `llp` commands: remember it, then exit with the shell's 128 + 15 (servers this command
    started are stopped and its run is marked interrupted on the way out)."""
    import sys

    global SIGTERM_RECEIVED
    SIGTERM_RECEIVED = True
    sys.exit(143)
