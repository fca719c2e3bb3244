"""Processes known by identity: a pid together with the time its process started.

Pids are reused (32,768 of them on many machines), so a pid written to a file by one process
may belong to another by the time it is read. Every file that keeps processes across a crash
(the embedded servers' users, `manage.py up`'s run file) keeps them as (pid, start time), and a
process counts as running only while that pid still has that start time.
"""

import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

import psutil

# (pid, start time): clock ticks since boot on Linux (/proc/<pid>/stat), exact and never
# changed by the clock; elsewhere psutil's creation time, in hundredths of a second.
Identity = tuple[int, int]


def started(pid: int) -> int | None:
    """When process `pid` started, or None when there is no such process (or only its zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # The command name (field 2) may hold spaces and parentheses: split after its last ")".
            fields = fh.read().rpartition(b")")[2].split()
        return None if fields[0] == b"Z" else int(fields[19])
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, ValueError, IndexError):
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time() * 100)
    except psutil.Error:
        return None


def identity(pid: int | None = None) -> Identity | None:
    """The identity of process `pid` (this process by default), or None when it is gone."""
    pid = os.getpid() if pid is None else pid
    start = started(pid)
    return None if start is None else (pid, start)


def is_running(process: Identity) -> bool:
    pid, start = process
    return started(pid) == start


def read_identities(path: Path) -> list[Identity]:
    """The identities a JSON file lists; nothing when it is missing or not such a list."""
    try:
        return [(int(pid), int(start)) for pid, start in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []


class UserList:
    """The processes using a shared server, kept as identities in a JSON file.

    Callers hold the server's lock around each call: the file is read, pruned and written whole.
    """

    def __init__(self, path: Path):
        self.path = path

    def others(self) -> list[Identity]:
        """The users still running, this process excluded (a dead user whose pid it inherited too)."""
        return [user for user in read_identities(self.path) if user[0] != os.getpid() and is_running(user)]

    def join(self) -> list[Identity]:
        """Record this process as a user; return the other users."""
        others = self.others()
        self.path.write_text(json.dumps([*others, identity()]))
        return others

    def leave(self) -> list[Identity] | None:
        """Forget this process; return the users left, or None when it was not one of them."""
        me = identity()
        if me not in read_identities(self.path):
            return None
        others = self.others()
        self.path.write_text(json.dumps(others))
        return others


def stop(processes: list[Identity | None], *, timeout: float = 10) -> None:
    """Stop each process (SIGTERM, so an RQ worker finishes its job and stops its scheduler), then
    SIGKILL whatever of it is left after `timeout` seconds, descendants included: they are found
    first, while their parents still link to them (RQ's scheduler and work horse outlive a worker
    that is killed)."""
    top, descendants = [], []
    for process in filter(None, processes):
        try:
            found = psutil.Process(process[0])
            if started(process[0]) != process[1]:
                continue
            descendants += found.children(recursive=True)
            top.append(found)
        except psutil.Error:
            continue
    for found in top:
        with contextlib.suppress(psutil.Error):
            found.terminate()
    _, alive = psutil.wait_procs(top, timeout=timeout)
    left = [found for found in [*alive, *descendants] if found.is_running()]
    for found in left:
        with contextlib.suppress(psutil.Error):
            found.kill()
    psutil.wait_procs(left, timeout=5)


def die_with_parent():
    """A `preexec_fn` that has the child sent SIGTERM when the process that starts it dies, also
    by SIGKILL (Linux's PR_SET_PDEATHSIG); None where there is no such call."""
    if not sys.platform.startswith("linux"):
        return None
    # Loaded before the fork: the child must not allocate between fork and exec.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def preexec():
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call above: nobody will signal
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def port_holder(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on, naming the process that listens there when it can be
    seen; None when it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the web server does, so a port whose last connections are in TIME_WAIT counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return None
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return str(error)
    try:
        listeners = [c.pid for c in psutil.net_connections(kind="tcp")
                     if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid]
    except psutil.Error:
        listeners = []
    for pid in listeners:
        try:
            return f"port {port} is taken: pid {pid} listens there ({' '.join(psutil.Process(pid).cmdline())})"
        except psutil.Error:
            continue
    return f"port {port} is taken by a process this user cannot see"


class RunFiles:
    """The run files of `manage.py up`: one per running `up`, named by its pid, listing its identity
    and its children's, so a restart after a crash finds what the crashed one left running."""

    def __init__(self, folder: Path):
        self.folder = folder

    def write(self, children: dict[str, int]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{os.getpid()}.json"
        running = {name: identity(pid) for name, pid in children.items()}
        draft = path.with_suffix(".draft")
        draft.write_text(json.dumps({"up": identity(), "children": {k: v for k, v in running.items() if v}}))
        draft.replace(path)  # whole or not at all: a restart reading it must never see half of it
        return path

    def stop_leftovers(self) -> list[tuple[int, str, int]]:
        """Stop the children of every `up` that is no longer running and forget its run file;
        return (up's pid, child's name, child's pid) of each child that was still running."""
        stopped = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                run = json.loads(path.read_text())
                up = (int(run["up"][0]), int(run["up"][1]))
                children = {name: (int(pid), int(start)) for name, (pid, start) in run["children"].items()}
            except (OSError, ValueError, TypeError, KeyError, IndexError):
                path.unlink(missing_ok=True)  # not a run file of ours
                continue
            if up[0] != os.getpid() and is_running(up):
                continue  # another `up`, alive: its children are its own
            left = {name: child for name, child in children.items() if is_running(child)}
            stop(list(left.values()))
            stopped += [(up[0], name, pid) for name, (pid, _) in left.items()]
            path.unlink(missing_ok=True)
        return stopped
