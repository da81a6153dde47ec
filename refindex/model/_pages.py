"""The bytes of the scanned file an index carries for libhdf5 (the h5py road)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np


@dataclass
class Pages:
    """Bytes of the scanned file an index carries, so that libhdf5 can open the file from the index
    (the h5py road): the metadata a scan read, in whole pages of ``page_size`` bytes.

    ``starts``/``ends`` (int64, sorted, disjoint) are the spans carried and ``data`` their bytes
    one after another.  ``index_ranges``: chunk indexes too large to carry, by dataset path:
    the spans their nodes lie in (no bytes), so a reader can fetch a whole index at once
    when a read first needs it instead of one node per round trip.  ``extents``: for each
    array whose chunks lie in the scanned file, the first and last byte its chunks span, so a
    reader finds which array a data read belongs to without reading every chunk table.

    ``in_file``: the bytes are not carried (``data`` is empty until a reader fetched them): the file
    is small enough that a reader fetches all of it, ``[0, file_size)`` (the one span), in the round
    trip of its freshness check.
    """

    page_size: int
    file_size: int
    starts: np.ndarray
    ends: np.ndarray
    data: bytes
    index_ranges: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    extents: dict[str, tuple[int, int]] = field(default_factory=dict)
    external_links: int = 0  # links into other files (h5py's file-object driver cannot follow them)
    reads_elsewhere: list[str] = field(default_factory=list)  # virtual datasets with sources in other files
    # Byte ranges of ``data`` equal to an array's inline chunk (item -1) or to an item of one: (start,
    # end, path, chunk key, item).  A JSON index leaves them out and its reader takes them from the
    # inline chunk (small datasets copied in; the global heap objects holding an NWB file's cached
    # specifications, which the index copies in too).
    holes: list[tuple[int, int, str, str, int]] = field(default_factory=list)
    in_file: bool = False
    encoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # JSON form, made once

    @classmethod
    def kept_in_file(cls, page_size: int, file_size: int, external_links: int,
                     reads_elsewhere: list[str]) -> "Pages":
        """Pages of a file a reader fetches whole (``in_file``): the one span, no bytes yet."""
        return cls(page_size, file_size, np.zeros(1, np.int64), np.full(1, file_size, np.int64), b"",
                   external_links=external_links, reads_elsewhere=reads_elsewhere, in_file=True)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @property
    def awaiting_bytes(self) -> bool:
        """The bytes do not cover the spans: in-file pages no reader has fetched yet (they serve nothing
        until then)."""
        return len(self.data) != int((self.ends - self.starts).sum())

    def fetched(self, data: bytes) -> "Pages":
        """These in-file pages with the file's bytes, as a reader fetched them."""
        return replace(self, data=data, encoded=None)
