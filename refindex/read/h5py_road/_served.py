"""The bytes an index carries (its pages), looked up by file offset."""

from __future__ import annotations

from bisect import bisect_right

from ...model import Pages


class PageMap:
    """Serve ``[start, end)`` from the pages when one span holds all of it.

    Lookups are a bisection over plain lists (libhdf5 asks thousands of times while
    pynwb builds a file: a list bisects faster than numpy searches one value).
    """

    def __init__(self, pages: Pages | None):
        self.pages = pages
        if pages is None or pages.awaiting_bytes:
            self.pages = None
            self.starts: list[int] = []
            self.ends: list[int] = []
            self.at: list[int] = []
            self.data = memoryview(b"")
            return
        self.starts = pages.starts.tolist()
        self.ends = pages.ends.tolist()
        self.at = []
        pos = 0
        for a, b in zip(self.starts, self.ends):
            self.at.append(pos)
            pos += b - a
        self.data = memoryview(pages.data)

    def get(self, start: int, end: int) -> memoryview | None:
        """The bytes ``start:end`` when the pages hold them all, else None."""
        i = bisect_right(self.starts, start) - 1
        if i < 0 or end > self.ends[i]:
            return None
        lo = self.at[i] + start - self.starts[i]
        return self.data[lo : lo + end - start]

    @property
    def nbytes(self) -> int:
        return len(self.data)
