"""File-system helpers every layer shares: atomic file writes, stage-and-swap of directories,
and placing a file by copy-on-write clone, copy or (large, read-only payloads) hard link.

A reader (a serving container, a concurrent lmi-build, a crash-resumed run) must never see half a
file or half a directory, so everything lmi-build owns is built beside its target (same
filesystem) and renamed into place. What becomes visible carries the permissions the user's
umask gives, never the owner-only ones of ``mkstemp`` (0600) or ``mkdtemp`` (0700): an artifact
or a cached model is meant to be read by the serving container's user too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from lmi_build.core.errors import LmiBuildError, Terminated

LinkMode = Literal["auto", "copy"]
# "copy" forces copies even on one filesystem (benchmarks, or when the source must stay untouched).
_link_mode: ContextVar[LinkMode] = ContextVar("lmi_build_link_mode", default="auto")
# The (device, inode) pairs of the user's own files (the source model, an --engine-dir): never
# hard-linked while anyone may write them, since lmi-build may not make them read-only.
_users_files: ContextVar[AbstractSet[tuple[int, int]]] = ContextVar("lmi_build_users_files", default=frozenset())

# errnos meaning "hard links are not possible here", so copying is the right fallback.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})


def current_umask() -> int:
    """The process umask. Linux reports it in /proc (Linux 4.7+); elsewhere it is read by setting
    and restoring it, which another thread creating a file at that instant could observe."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` gives a new file under the current umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory under the current umask."""
    return 0o777 & ~current_umask()


def atomic_write_bytes(path: Path, data: bytes, *, check: Callable[[Path], None] | None = None) -> Path:
    """Write ``data`` to ``path`` atomically. ``check`` may inspect the temporary file (and raise)
    before it replaces ``path``; on any failure ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, file_mode())
        if check is not None:
            check(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: Path, text: str, *, encoding: str = "utf-8",
                      check: Callable[[Path], None] | None = None) -> Path:
    """``atomic_write_bytes`` of ``text`` (newlines written as given, on every platform)."""
    return atomic_write_bytes(path, text.encode(encoding), check=check)


def atomic_write_json(path: Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False,
                      check: Callable[[Path], None] | None = None) -> Path:
    """``data`` as JSON text ending in a newline, written atomically."""
    return atomic_write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n", check=check)


# Labels of the hidden siblings lmi-build creates next to a directory it builds or replaces.
TEMP_LABELS = ("work", "staging", "old")


def make_temp_dir(beside: Path, label: str) -> Path:
    """A new empty hidden directory ``.<name>.<label>-<pid>-XXXXXXXX`` next to ``beside``: on the
    same filesystem, so what is built in it can be hard-linked from there and renamed onto
    ``beside``. The pid in the name lets a later run tell a killed run's leftovers from a live one's."""
    beside.parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f".{beside.name}.{label}-{os.getpid()}-", dir=beside.parent))
    os.chmod(path, dir_mode())  # before it can become visible under its final name
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def live_users(directory: Path) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes that work in ``directory``: their current
    directory, or a file they hold open, is inside it (Linux, from /proc; elsewhere nobody can be
    told, and the list is empty). A killed build's compiler may outlive it there."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return []
    root = os.path.realpath(directory)
    inside = (root, root + os.sep)
    users: list[tuple[int, str]] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if _proc_state(entry) == "Z":
                continue  # a zombie holds nothing
            links = [os.readlink(entry / "cwd")]
            links += [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:  # gone meanwhile, or another user's (then it cannot be ours either)
            continue
        if any(link == inside[0] or link.startswith(inside[1]) for link in links):
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                name = "?"
            users.append((int(entry.name), name))
    return users


def _proc_state(entry: Path) -> str:
    stat_line = (entry / "stat").read_text()
    return stat_line[stat_line.rindex(")") + 2:][:1]


def stale_temp_dirs(beside: Path) -> list[Path]:
    """The hidden siblings of ``beside`` (``make_temp_dir``'s names) whose creating process is gone:
    what a killed build left behind."""
    if not beside.parent.is_dir():
        return []
    stale: list[Path] = []
    for label in TEMP_LABELS:
        for candidate in beside.parent.glob(f".{glob_escape(beside.name)}.{label}-*"):
            pid_text = candidate.name[len(f".{beside.name}.{label}-"):].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)) and candidate.is_dir() \
                    and not candidate.is_symlink():
                stale.append(candidate)
    return sorted(stale)


def remove_stale_temp_dirs(beside: Path) -> tuple[list[Path], dict[Path, list[tuple[int, str]]]]:
    """Remove ``stale_temp_dirs(beside)``, except those a live process still works in (a killed
    build's compiler): returns what was removed, and what was kept with who works there."""
    removed: list[Path] = []
    kept: dict[Path, list[tuple[int, str]]] = {}
    for path in stale_temp_dirs(beside):
        users = live_users(path)
        if users:
            kept[path] = users
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed, kept


def glob_escape(name: str) -> str:
    """``name`` with glob metacharacters escaped (a directory may be called ``out[1]``)."""
    return "".join(f"[{char}]" if char in "*?[" else char for char in name)


class PlantedPath(LmiBuildError):
    """A path lmi-build creates next to user data (a lock, a partial download, a staging file) is
    already there as a symbolic link or as something not ours: following it would write into (or
    delete) whatever it points at."""

    code = "planted_path"

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} is {what}; lmi-build creates this path itself and will not write through it",
                         hint=f"remove {path} (check who created it), then rerun")


def open_private(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of a file lmi-build owns, never through a symbolic link (O_NOFOLLOW) and only
    onto a regular file; raises ``PlantedPath`` otherwise."""
    try:
        handle = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) or path.is_symlink():
            raise PlantedPath(path, "a symbolic link") from None
        raise
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise PlantedPath(path, "not a regular file")
    return handle


def private_dir(path: Path) -> Path:
    """``path`` as a directory of ours: created when missing; refused when it is a symbolic link,
    not a directory, or owned by another user (a directory planted to receive our files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, dir_mode())
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise PlantedPath(path, "a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise PlantedPath(path, "not a directory")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise PlantedPath(path, "owned by another user")
    return path


class DirectoryBusy(Exception):
    """Another process holds the lock of a directory (``directory_lock``)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by {holder}")
        self.path = path
        self.holder = holder


@contextmanager
def directory_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``target`` (a directory about to be created or replaced) for the
    block, or raise ``DirectoryBusy`` at once: two writers of one directory must not both succeed.

    The lock is ``flock`` on a hidden file beside ``target``, so it is released by the kernel when
    the process dies; the file is removed on release, and a lock taken on a file that was removed
    meanwhile is taken again on the new one."""
    lock_path = target.parent / f".{target.name}.lock"
    while True:
        handle = _lock_file(target, lock_path)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 64, 0).decode("ascii", "replace").strip() or "another process"
            os.close(handle)
            raise DirectoryBusy(target, holder) from None
        try:
            same = os.fstat(handle).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(handle)  # the holder before us removed this file: lock the current one
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"lmi-build pid {os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        lock_path.unlink(missing_ok=True)
        os.close(handle)


def _lock_file(target: Path, lock_path: Path) -> int:
    """The lock file's descriptor. A failure names ``target``, the directory the user gave (issue 42:
    ``--output /proc/x`` said "No such file or directory: /proc/.x.lock", a file they never named)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return open_private(lock_path, os.O_RDWR | os.O_CREAT, file_mode())
    except OSError as error:
        reason = (error.strerror or str(error) or type(error).__name__).lower()
        raise LmiBuildError(f"cannot write {target}: files cannot be created in {target.parent} ({reason})",
                            hint="choose a location you can write, or fix its permissions", code="os") from error


# ---- the commit point: an interrupt leaves either the old output or a finished build ----
#
# Replacing an output is three steps (old -> aside, new -> output, remove aside). Ctrl-C or SIGTERM
# between them once left the output replaced *and* the build reporting "interrupted", with the old
# one in a hidden .old-* folder. Across the swap those signals are held: one that came before the new
# output was in place puts the old one back and then acts (exit 130, output byte-identical); one that
# came after it is the build's success. Inside a ``commit_scope`` (a command line) the hold lasts
# from the commit to the end of the command, except in ``interruptible`` blocks (a cache store, a
# publish), so reporting the finished build can never turn into "interrupted".

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Hold:
    """The signals held now: who handled them before, what arrived, whether a block may be interrupted."""

    def __init__(self, previous: dict[int, Any]) -> None:
        self.previous = previous
        self.received: list[int] = []
        self.interruptible = False

    def handle(self, signum: int, frame: object) -> None:
        if self.interruptible:
            self.interruptible = False  # a second signal must not interrupt the cleanup
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.received.append(signum)


class CommitScope:
    """What a command's commit scope saw: the output it committed, and the signals that arrived
    after that and were not acted on (the build had finished)."""

    def __init__(self) -> None:
        self.committed: Path | None = None
        self.late: list[int] = []


_hold: _Hold | None = None
_scope: CommitScope | None = None


def _start_holding() -> bool:
    """Hold SIGINT and SIGTERM (main thread only: elsewhere no handler can be set). False when
    they are held already or cannot be."""
    global _hold
    if _hold is not None or threading.current_thread() is not threading.main_thread():
        return False
    previous: dict[int, Any] = {int(signum): signal.getsignal(signum) for signum in HELD_SIGNALS}
    _hold = _Hold(previous)
    for signum in HELD_SIGNALS:
        signal.signal(signum, _hold.handle)
    return True


def _stop_holding() -> list[int]:
    """Put the previous handlers back; returns the signals that arrived meanwhile."""
    global _hold
    hold, _hold = _hold, None
    if hold is None:
        return []
    for signum, handler in hold.previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    return hold.received


def _deliver(signum: int) -> None:
    """Act on a held signal as its handler would have (raise KeyboardInterrupt, or die)."""
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def _arrived_since(mark: int) -> bool:
    return _hold is not None and len(_hold.received) > mark


@contextmanager
def commit_scope() -> Iterator[CommitScope]:
    """The scope of one command: once it commits an output (``replace_directory``), SIGINT and
    SIGTERM are held until the scope ends, except inside ``interruptible`` blocks; those that
    arrived meanwhile are in ``late``, never acted on."""
    global _scope
    outer, scope = _scope, CommitScope()
    _scope = scope
    try:
        yield scope
    finally:
        _scope = outer
        if scope.committed is not None:
            scope.late.extend(_stop_holding())


@contextmanager
def interruptible() -> Iterator[None]:
    """After the commit, a block that Ctrl-C or SIGTERM may stop (raising as usual), one that was
    held meanwhile at once: work that adds to a finished build (a cache store, a publish)."""
    hold = _hold
    if hold is None:
        yield
        return
    if hold.received:
        signum = hold.received.pop(0)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    hold.interruptible = True
    try:
        yield
    finally:
        hold.interruptible = False


def take_late_signals() -> list[int]:
    """The signals held since the commit that nobody acted on (they are forgotten here)."""
    if _hold is None:
        return []
    taken, _hold.received[:] = list(_hold.received), []
    return taken


def replace_directory(staged: Path, target: Path, *, commits_output: bool = False) -> None:
    """Rename the finished directory ``staged`` to ``target`` (same filesystem). An empty
    ``target`` is simply replaced; a non-empty one is moved aside first and deleted only once
    ``staged`` is in place, or put back when that rename fails. SIGINT and SIGTERM are held
    across it (see above): one that arrives before ``staged`` is in place leaves ``target`` as it
    was and then acts; one after it does not undo the replacement. ``commits_output``: ``target``
    is the command's result (the artifact), so inside a commit scope the hold lasts to its end."""
    holding = _start_holding()
    mark = len(_hold.received) if _hold is not None else 0
    committed = False
    try:
        committed = _swap(staged, target, mark)
    finally:
        if committed and commits_output and _scope is not None:
            _scope.committed = target  # the scope holds the signals from here to its end
        elif holding:
            for signum in _stop_holding()[:1]:
                _deliver(signum)


def _swap(staged: Path, target: Path, mark: int) -> bool:
    """The swap itself: True once ``staged`` is ``target``; False (``target`` as it was) when a
    held signal arrived before that."""
    if target.is_dir() and not any(target.iterdir()):
        if _arrived_since(mark):
            return False
        target.rmdir()
        if _arrived_since(mark):
            os.mkdir(target, dir_mode())  # as it was: empty
            return False
    if not target.exists():
        if _arrived_since(mark):
            return False
        os.rename(staged, target)
        return True
    aside = target.with_name(f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.rename(target, aside)
    if _arrived_since(mark):
        os.rename(aside, target)
        return False
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return True


def publish_directory(staged: Path, target: Path) -> bool:
    """Rename ``staged`` to ``target`` unless ``target`` already exists (another process built the
    same content first: theirs is kept). True when ``staged`` became ``target``."""
    try:
        os.rename(staged, target)
    except OSError:
        if not target.is_dir():
            raise
        return False
    return True


@contextmanager
def staged_directory(target: Path, *, keep_existing: bool = False, commits_output: bool = False) -> Iterator[Path]:
    """Build a directory in a fresh temporary sibling of ``target`` and, when the block succeeds,
    swap it into place with ``replace_directory`` (or, with ``keep_existing``, with
    ``publish_directory``: a ``target`` that exists meanwhile wins). When the block raises, the
    staging directory is removed and ``target`` is untouched. ``commits_output``: see ``replace_directory``."""
    staging = make_temp_dir(target, "staging")
    try:
        yield staging
        if keep_existing:
            publish_directory(staging, target)
        else:
            replace_directory(staging, target, commits_output=commits_output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when it was swapped in


@contextmanager
def users_files(found: AbstractSet[tuple[int, int]]) -> Iterator[None]:
    """Inside this block ``link_or_copy`` clones or copies these files rather than hard-linking them
    while they are writable: two outputs (or an output and the user's model) would otherwise share
    one writable inode, and an edit through one would change the others."""
    token = _users_files.set(found)
    try:
        yield
    finally:
        _users_files.reset(token)


@contextmanager
def link_mode(mode: LinkMode) -> Iterator[None]:
    """``link_or_copy`` inside this block links when it can (``"auto"``) or always copies."""
    token = _link_mode.set(mode)
    try:
        yield
    finally:
        _link_mode.reset(token)


# Below this size a file is copied even where a hard link is possible: the cost is negligible and a
# copy can never be edited through another path. serving.properties, configs, tokenizers and
# manifests are always copies; only large payloads (weights, engines, NEFFs) are ever shared.
SHARED_MIN_BYTES = 16 * 1024 * 1024

# ioctl FICLONE (linux/fs.h): a copy-on-write clone of a whole file (btrfs, XFS, bcachefs, ...).
_FICLONE = 0x40049409


def _reflink(src: Path, dst: Path) -> bool:
    """Clone ``src`` to the new file ``dst`` copy-on-write; False (and no ``dst``) where the file
    system cannot. A clone shares blocks, never the inode: writing one leaves the other as it was."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with open(src, "rb") as source:
        target = os.open(dst, flags, 0o600)
        try:
            fcntl.ioctl(target, _FICLONE, source.fileno())
        except OSError:
            os.close(target)
            os.unlink(dst)
            return False
        os.close(target)
    return True


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def link_or_copy(src: Path, dst: Path) -> Literal["reflink", "link", "copy"]:
    """Place ``src`` at ``dst`` without ever sharing a small writable file: a copy-on-write clone
    where the file system supports it, else a copy for files under ``SHARED_MIN_BYTES``, else a
    hard link (same file system; never for root, whom no mode bit stops; never for a writable file of
    the user's, see ``users_files``) or a copy. A hard-linked payload is shared with its source, so
    the caller makes what it owns read-only afterwards (``freeze_shared``).

    Never a symbolic link: an artifact is uploaded and moved, a link would dangle. Symlinked
    sources (the Hugging Face cache) are followed. ``dst`` must not exist.
    """
    if dst.exists() or dst.is_symlink():
        raise FileExistsError(f"refusing to overwrite {dst}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    real = src.resolve()
    mode = file_mode() | (real.stat().st_mode & 0o111 & ~current_umask())
    if _link_mode.get() == "auto":
        if _reflink(real, dst):
            os.chmod(dst, mode)
            return "reflink"
        # Root writes through any mode bits, so for root a shared inode is always a writable one.
        info = real.stat()
        users_writable = (info.st_dev, info.st_ino) in _users_files.get() and info.st_mode & 0o222
        if info.st_size >= SHARED_MIN_BYTES and not _is_root() and not users_writable:
            try:
                os.link(real, dst)
                return "link"
            except OSError as error:
                if error.errno not in _NO_LINK:
                    raise
    shutil.copyfile(real, dst)
    # A copy is ours: the umask's mode (plus the source's execute bits), never an owner-only 0600
    # that a library gave the source.
    os.chmod(dst, mode)
    return "copy"


def freeze_shared(root: Path, *, keep: AbstractSet[tuple[int, int]] = frozenset()) -> int:
    """Make every file under ``root`` that has another hard link read-only for everyone, except the
    inodes in ``keep`` (the user's own files, never ours to change). A shared payload can then be
    replaced (rename, rm) but not edited in place through any of its paths, so an edit to one
    output can never reach the cache or another output. Returns the number of files changed."""
    changed = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            if not path.is_file() or path.is_symlink() or info.st_nlink < 2 \
                    or (info.st_dev, info.st_ino) in keep or not info.st_mode & 0o222:
                continue
            os.chmod(path, info.st_mode & 0o7555)
            changed += 1
    return changed


def inodes(root: Path) -> set[tuple[int, int]]:
    """The (device, inode) pairs of the regular files under ``root`` (links followed)."""
    found: set[tuple[int, int]] = set()
    if root.is_dir():
        for path in root.rglob("*"):
            if path.is_file():
                info = path.stat()
                found.add((info.st_dev, info.st_ino))
    return found


def make_readable(root: Path, *, keep: set[tuple[int, int]]) -> None:
    """Give every file and directory under ``root`` at least the read (and, for directories,
    search) bits the umask allows, except the inodes in ``keep`` (hard links to files that are not
    ours to change, such as the user's source model)."""
    read_bits = 0o444 & ~current_umask()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            info = path.lstat()
            if path.is_symlink() or (info.st_dev, info.st_ino) in keep:
                continue
            wanted = read_bits | ((read_bits >> 2) & 0o111 if path.is_dir() else 0)
            if info.st_mode & wanted != wanted:
                os.chmod(path, (info.st_mode & 0o7777) | wanted)


def link_tree(source: Path, destination: Path, *, share_writable: bool = True) -> None:
    """Recreate the tree ``source`` under ``destination`` (which may exist, empty) with
    ``link_or_copy`` for every file; symlinked files are followed. ``share_writable=False`` copies
    every file that someone could still write (a user's file linked into an output) instead of
    linking it, so the copy (a cache entry) shares only frozen payloads."""

    def place(src: str, dst: str) -> None:
        if not share_writable and os.stat(src).st_mode & 0o222:
            with link_mode("copy"):
                link_or_copy(Path(src), Path(dst))
        else:
            link_or_copy(Path(src), Path(dst))

    shutil.copytree(source, destination, copy_function=place, dirs_exist_ok=True)
