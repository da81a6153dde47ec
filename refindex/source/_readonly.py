"""The one base of refindex's read-only file objects (libhdf5's file-object driver reads them).

h5py's driver, ``io.BufferedReader`` and numpy ask a raw file the same four things: may it be
read, may it seek, where is it, and move there.  The block cache, the recording local file and
the h5py road's file answer them alike from a position and a size; what differs is how each
reads (its own ``readinto``), so only that is theirs.
"""

from __future__ import annotations

import io


class ReadOnlyFile(io.RawIOBase):
    """A read-only, seekable raw file of ``size`` bytes, read from ``pos`` (subclasses set both and
    give ``readinto``)."""

    size: int
    pos: int = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move to ``offset`` from the start (``whence`` 0), from here (1) or from the end (2)."""
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos
