"""Writes that appear whole or not at all: a temporary name beside the destination, then a rename.

Temporary names carry the writing process's id (``.refindex-<pid>-...``), so when a worker
process is killed in the middle of a write, :func:`remove_leftovers` can remove exactly
what that process left, and nothing another refindex process is writing in the same folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from typing import Any, Iterator

from ..errors import OutputError

TEMP_PREFIX = ".refindex-"


def _prefix(pid: int | None = None) -> str:
    return f"{TEMP_PREFIX}{os.getpid() if pid is None else pid}-"


def current_umask() -> int:
    """The process umask (read from /proc where it can be, so no other thread sees it change)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_error(e: BaseException, path: str | os.PathLike, what: str = "the index") -> OutputError:
    """The one-line error for an output that cannot be written: it names the output, not a temporary file."""
    if isinstance(e, OutputError):
        return e
    if isinstance(e, PermissionError):
        why = "permission denied (a read-only folder?): choose another output"
    elif isinstance(e, (NotADirectoryError, FileExistsError)):
        why = "a part of its path is a file, not a folder"
    elif isinstance(e, OSError) and e.errno == errno.ENOSPC:
        why = "no space left on the device"
    elif isinstance(e, OSError) and e.errno == errno.EROFS:
        why = "a read-only file system: choose another output"
    else:
        from ..source import reason_of

        why = reason_of(e) or (e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}")
    return OutputError(f"cannot write {what}: {why}", file=os.fspath(path))


def check_writable(path: str | os.PathLike, what: str = "the index") -> None:
    """Refuse now (:class:`OutputError` naming ``path``) an output no file can be made beside,
    before any work is spent on what would go there."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=_prefix(), suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise output_error(e, path, what) from e


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, what: str = "the index") -> Iterator[Any]:
    """A binary file handle on a temporary name beside ``path``, renamed into place on success.

    The file gets the mode any file the user writes gets (0666 less the umask), not the
    owner-only mode of a temporary file: indexes are made to be shared.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_prefix(), suffix=".tmp", dir=folder)
    except OSError as e:
        raise output_error(e, path, what) from e
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):  # writing or renaming (a full disk, a folder made read-only meanwhile)
            raise output_error(e, path, what) from e
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, what: str = "the index") -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    with atomic_file(path, what) as fh:
        fh.write(data)




@contextlib.contextmanager
def atomic_folder(out_dir: str) -> Iterator[str]:
    """A temporary folder beside ``out_dir`` to fill; swapped into place on success, removed on failure."""
    parent = os.path.dirname(out_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=_prefix(), suffix=".parq.tmp", dir=parent)
    except OSError as e:
        raise output_error(e, out_dir) from e
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # a folder as the user makes them (mkdtemp's is 0700)
        yield tmp
        _swap_into_place(tmp, out_dir)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise output_error(e, out_dir) from e
        raise


def _swap_into_place(tmp: str, out_dir: str) -> None:
    """Rename ``tmp`` to ``out_dir``; an existing index is moved aside first, then removed."""
    old = None
    if os.path.exists(out_dir):
        old = tempfile.mkdtemp(prefix=_prefix(), suffix=".old", dir=os.path.dirname(out_dir))
        os.rmdir(old)
        os.rename(out_dir, old)
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        if old is not None:
            os.rename(old, out_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_leftovers(path: str | os.PathLike, pid: int) -> list[str]:
    """Remove the temporary files and folders process ``pid`` left beside ``path``; returns their names.

    For a process killed in the middle of writing (a crashed or timed-out worker).  A
    previous parquet index it had moved aside (``.old``) goes back into place when the
    new one never arrived.
    """
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        names = [n for n in os.listdir(folder) if n.startswith(_prefix(pid))]
    except OSError:
        return []
    for name in names:
        full = os.path.join(folder, name)
        if name.endswith(".old") and not os.path.exists(path):
            with contextlib.suppress(OSError):  # (another cleanup of the same process may have been first)
                os.rename(full, path)
        elif os.path.isdir(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
    return names
