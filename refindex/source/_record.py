"""Which bytes of a file a scan read: the raw material of an index's pages.

An index may carry the HDF5 metadata a scan touched, so that libhdf5 can later open the
file from the index alone (the h5py road, :mod:`refindex.read.h5py_road`).  What counts
is what was *read*, whoever read it: libhdf5 through the block cache or a local file
object, the scan's own batched reads of small values, or a native chunk-index reader
reading through the source.  So the recording happens here, at the source, and nothing
above needs to know how the bytes were read.

Reads carry a tag saying what they served: ``"meta"`` by default; a chunk index walk tags
its reads with its dataset (``"index:/path"``), so the page choice can leave out indexes
too large to carry; reads that only check data are not recorded (:meth:`ReadRecorder.paused`).
"""

from __future__ import annotations

import os
from array import array
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from ._readonly import ReadOnlyFile

META = "meta"
INDEX_PREFIX = "index:"


class ReadRecorder:
    """Byte ranges read from one file, each with the tag that was current when it was read.

    ``page_size``: the granularity pages are kept at; readers that fetch exact ranges
    (see :meth:`~refindex.source.BlockCache.read_ranges`) fetch whole pages instead while
    recording, so the pages' bytes are at hand when the index is written.
    """

    def __init__(self, page_size: int = 4096):
        self.page_size = int(page_size)
        self.starts = array("q")
        self.ends = array("q")
        self.tags = array("i")
        self.names: list[str] = [META]
        self._ids = {META: 0}
        self._tag = 0
        self._paused = 0
        self._taken = 0

    @property
    def active(self) -> bool:
        """Are reads recorded right now (not paused)?"""
        return not self._paused

    def note(self, start: int, end: int) -> None:
        """Record a read of bytes ``start:end`` under the current tag."""
        if self._paused or end <= start:
            return
        self.starts.append(start)
        self.ends.append(end)
        self.tags.append(self._tag)

    def _id(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = len(self.names)
            self.names.append(name)
        return self._ids[name]

    @contextmanager
    def tagged(self, name: str) -> Iterator[None]:
        """Reads made inside are recorded under ``name`` (e.g. ``"index:/acquisition/x/data"``)."""
        before, self._tag = self._tag, self._id(name)
        try:
            yield
        finally:
            self._tag = before

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Reads made inside are not recorded (checks of data values, the pages' own reads)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def take(self) -> tuple[bytes, bytes, list[str]]:
        """What was recorded since the last take, to send to another process (see :meth:`add`)."""
        lo, self._taken = self._taken, len(self.starts)
        tags = [self.names[t] for t in self.tags[lo:]]
        return self.starts[lo:].tobytes(), self.ends[lo:].tobytes(), tags

    def add(self, taken: tuple[bytes, bytes, list[str]]) -> None:
        """Record what another process's recorder :meth:`take` returned (a split walk's helper)."""
        starts, ends, tags = taken
        self.starts.frombytes(starts)
        self.ends.frombytes(ends)
        self.tags.extend(self._id(t) for t in tags)

    def by_tag(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """tag -> (starts, ends) of every range recorded under it, in the order read."""
        starts = np.frombuffer(self.starts, dtype=np.int64) if len(self.starts) else np.zeros(0, np.int64)
        ends = np.frombuffer(self.ends, dtype=np.int64) if len(self.ends) else np.zeros(0, np.int64)
        tags = np.frombuffer(self.tags, dtype=np.int32) if len(self.tags) else np.zeros(0, np.int32)
        return {name: (starts[tags == i].copy(), ends[tags == i].copy()) for i, name in enumerate(self.names)
                if (tags == i).any()}


class LocalFile(ReadOnlyFile):
    """A local file for libhdf5's file-object driver that records every read.

    Used for local scans whose index carries pages: libhdf5's own (sec2) driver reads by
    path where nothing can see it.  ``os.pread``: positioned reads share no file offset,
    so the scan's batched reads and libhdf5's never race.
    """

    def __init__(self, path: str, recorder: ReadRecorder):
        super().__init__()
        self.path = path
        self.recorder = recorder
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self.size = os.fstat(self._fd).st_size
        self.pos = 0

    def __repr__(self) -> str:
        return self.path  # libhdf5 names the file after it: external links resolve beside it

    def readinto(self, b) -> int:
        if self.pos >= self.size:  # past the end (a damaged address may exceed what pread takes): nothing
            return 0
        n = os.preadv(self._fd, [b], self.pos)
        self.recorder.note(self.pos, self.pos + n)
        self.pos += n
        return n

    def pread(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` (fewer at the end of the file), recorded as read."""
        if start >= self.size:
            return b""
        data = os.pread(self._fd, max(0, min(end, self.size) - start), start)
        self.recorder.note(start, start + len(data))
        return data

    def close(self) -> None:
        if not self.closed and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()
