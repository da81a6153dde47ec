"""Errors raised by refindex.

Every failure a user can meet is a :class:`RefindexError` whose message names the
file, the object inside it (when there is one) and the reason, so a batch log line
is enough to act on.
"""

from __future__ import annotations


class RefindexError(Exception):
    """Base class: something could not be indexed or read faithfully."""

    def __init__(self, reason: str, *, file: str | None = None, path: str | None = None):
        self.reason = reason
        self.file = file
        self.path = path
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.path:
            where.append(self.path)
        return f"{': '.join(where)}: {self.reason}" if where else self.reason


class RefindexWarning(UserWarning):
    """Something works, but not the way a user may expect (said once, in the user's words)."""


class NotHDF5Error(RefindexError):
    """The input is not an HDF5 file (bad signature, truncated or unreadable)."""


class UnsupportedError(RefindexError):
    """An object exists in the file but cannot be represented faithfully in the index."""


class GroupNotFound(RefindexError, ValueError):
    """``group=`` names no group of the file: nothing is there, or a dataset is.  Also a
    ``ValueError``, which is what VirtualiZarr's own HDF parser raises for such a ``group``."""

    @classmethod
    def naming(cls, group: str, kinds: dict[str, str], *, file: str | None = None) -> "GroupNotFound":
        """The error for ``group``, from ``kinds`` (every node's path, "a/b" or "" for the root, to
        "group" or "array"): says what is there, and lists the groups of its nearest existing parent."""
        path = group.strip("/")
        parent = path
        while parent and kinds.get(parent) != "group":
            parent = parent.rpartition("/")[0]
        inside = sorted("/" + k for k, kind in kinds.items()
                        if kind == "group" and k and k.rpartition("/")[0] == parent)
        where = "/" + parent
        listed = (f"the groups in {where}: {', '.join(inside[:20])}" + (f" (and {len(inside) - 20} more)"
                  if len(inside) > 20 else "")) if inside else f"{where} holds no group"
        what = ("is an array (an HDF5 dataset), not a group" if kinds.get(path) == "array"
                else f"is not in {'the file' if not parent else where}")
        return cls(f"group {group!r} {what}; {listed}", file=file)


class NotForXarray(RefindexError, NotImplementedError):
    """The VirtualiZarr parser refuses a file xarray cannot model as it is (HDMF/NWB: object
    references, links, ragged tables).  Also a ``NotImplementedError``, which is what
    VirtualiZarr's own HDF parser raises for the object references of such files."""


class SourceError(RefindexError):
    """The bytes could not be fetched (missing file, permissions, network)."""


class VerifyError(RefindexError):
    """Data read through the index differs from what h5py reads."""


class OutputError(RefindexError):
    """An output (an index, a manifest, a repository) cannot be written where it was asked for."""


class StaleIndexError(RefindexError):
    """The source changed since the index was made (its size, or its validators and the bytes the
    index depends on): its offsets may point at other data now."""


class IndexMismatch(RefindexError):
    """The native chunk-index readers and libhdf5 list different chunks: a refindex bug, raised only where
    every native table is checked against libhdf5's (``REFINDEX_CHECK_CHUNK_INDEX``, the test suite)."""


class WorkerCrashed(RefindexError):
    """A worker process died while running a job (a crash inside libhdf5 or a codec)."""


class WorkerTimeout(RefindexError):
    """A job ran longer than its time limit; its worker was killed."""


class UntrustedReference(RefindexError):
    """An index names a URL its reader must not fetch unasked (a local file from a remote index, a
    cloud metadata or private-network host, an odd protocol): refused before any request.

    ``key``: one key that names it; ``url``: the URL; ``uses``: how many keys name it (0: unknown).
    """

    def __init__(self, reason: str, *, key: str, url: str, uses: int = 0, file: str | None = None):
        self.key = key
        self.url = url
        self.uses = uses
        super().__init__(reason, file=file)
