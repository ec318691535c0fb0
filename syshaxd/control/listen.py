"""The control socket: where it lives, single-instance locking, safe creation.

The socket is created here rather than by uvicorn because uvicorn's ``uds=`` binds first and
sets the mode afterwards (a window where it is world-writable) and asyncio deletes an
existing path even when a live daemon listens on it. Instead: take an ``flock`` on a lock
file next to the socket (a second daemon fails here), remove a stale socket, create the
socket with mode 0600 before ``bind()``, then hand it to the control group with mode 0660.
Who may do what is in :mod:`syshaxd.control.peercred`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from syshaxd.control.peercred import group_name, resolve_group

log = logging.getLogger("syshaxd.control")



class ControlSocketError(Exception):
    """The control socket cannot be set up; the message says why and what to do."""


class AlreadyRunning(ControlSocketError):
    """Another daemon holds the lock for this socket."""


# ---------------------------------------------------------------------------------------
# Single instance


class InstanceLock:
    """An exclusive ``flock`` on ``<socket>.lock``; held for the daemon's whole life."""

    def __init__(self, path: Path) -> None:
        """Prepare a lock on ``path`` (not taken yet)."""
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`AlreadyRunning` naming the holder's pid."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                raise AlreadyRunning(self._busy_message(holder)) from None
            # The previous holder may have unlinked the file between our open and flock:
            # then we hold a lock nobody else can see; retry on the current file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def _busy_message(self, holder: str) -> str:
        who = f"pid {holder}" if holder.isdigit() else "another process"
        sock = self.path.with_suffix("")
        return (
            f"another syshaxd ({who}) is already running with control socket {sock} "
            f"(lock {self.path} is held); stop it first, or give this one its own control.socket"
        )

    def in_place(self) -> bool:
        """Whether the lock file on disk is still the one this lock holds."""
        if self._fd is None:
            return False
        try:
            return os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def forget(self) -> None:
        """Drop the lock without touching the file (someone deleted it; a new lock took its place)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def release(self) -> None:
        """Remove the lock file and drop the lock (unlink first, so no one locks a dead file)."""
        if self._fd is None:
            return
        if self.in_place():  # not another daemon's lock, made after this one's file was deleted
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None


# ---------------------------------------------------------------------------------------
# Creating the socket


def _remove_stale(path: Path) -> None:
    """Delete a socket file nobody listens on; refuse anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ControlSocketError(f"{path} exists and is not a socket; remove it or set control.socket elsewhere")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ControlSocketError(f"cannot check the existing socket {path}: {exc.strerror}") from None
    else:
        raise AlreadyRunning(
            f"a process is listening on {path} without holding {path}.lock; "
            "stop it first, or give this daemon its own control.socket"
        )
    finally:
        probe.close()
    log.info("removing stale control socket %s", path)
    path.unlink(missing_ok=True)


@dataclass
class ControlSocket:
    """The listening control socket and the lock that guards it."""

    path: Path
    sock: socket.socket
    lock: InstanceLock
    gid: int
    #: (st_dev, st_ino) of the socket file this socket made
    inode: tuple[int, int] = (0, 0)

    def deleted(self) -> bool:
        """Whether the socket file is gone from its path (so no new client can connect)."""
        try:
            os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            pass  # cannot tell (a permission change on the way): leave it alone
        return False

    def replaced(self) -> bool:
        """Whether the path now names some other file than the socket this daemon made."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != self.inode

    def remake(self) -> ControlSocket:
        """A new listening socket at this path after its file was deleted (this one stays open
        for the clients already connected to it; close it when they are done).

        The lock is kept, or taken again when its file was deleted too (a second daemon may
        have taken it meanwhile: then :class:`AlreadyRunning`).

        Raises:
            ControlSocketError: the directory, lock or socket cannot be made again.
        """
        lock = self.lock
        if not lock.in_place():
            lock = InstanceLock(self.lock.path)
            try:
                self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                lock.acquire()
            except PermissionError:
                raise ControlSocketError(f"cannot write a lock file in {self.path.parent}: permission denied") from None
            except OSError as exc:
                raise ControlSocketError(f"cannot make {self.path.parent} again: {exc.strerror or exc}") from None
            self.lock.forget()
            self.lock = lock
        sock, gid = _listen(self.path, self.gid)
        return ControlSocket(path=self.path, sock=sock, lock=lock, gid=gid, inode=_inode(self.path))

    def close(self) -> None:
        """Close the socket, remove its file (if it is still this socket's), release the lock."""
        self.sock.close()
        try:
            st = os.lstat(self.path)
            if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self.inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.lock.release()


def _inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _listen(path: Path, gid: int, backlog: int = 64) -> tuple[socket.socket, int]:
    """Bind and listen at ``path`` with mode 0660 for ``gid``; returns the socket and the gid it got."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        # Owner-only before the name exists, so no one can connect during setup.
        os.fchmod(sock.fileno(), 0o600)
        sock.bind(str(path))
        try:
            os.chown(path, -1, gid)
        except PermissionError:
            log.warning("cannot give %s to group %s: not a member; keeping gid %d", path, group_name(gid), os.getegid())
            gid = os.getegid()
        os.chmod(path, 0o660)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        path.unlink(missing_ok=True)
        raise ControlSocketError(f"cannot create control socket {path}: {exc.strerror or exc}") from None
    return sock, gid


def create_control_socket(path: Path, group: str, backlog: int = 64) -> ControlSocket:
    """Lock, clear a stale file, and create the listening socket with mode 0660 for ``group``.

    Raises:
        AlreadyRunning: a live daemon owns this socket (its socket is left alone).
        ControlSocketError: the directory or socket cannot be created.
    """
    directory = path.parent
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise ControlSocketError(f"cannot create the socket directory {directory}: {exc.strerror}") from None
    lock = InstanceLock(path.with_name(path.name + ".lock"))
    try:
        lock.acquire()
    except PermissionError:
        raise ControlSocketError(f"cannot write a lock file in {directory}: permission denied") from None
    try:
        _remove_stale(path)
        gid = resolve_group(group)
        if gid is None:
            gid = os.getegid()
            log.warning(
                "control.group %r does not exist: the control socket belongs to gid %d (%s)",
                group, gid, group_name(gid),
            )
        sock, gid = _listen(path, gid, backlog)
    except BaseException:
        lock.release()
        raise
    return ControlSocket(path=path, sock=sock, lock=lock, gid=gid, inode=_inode(path))
