"""Progress of one scan, for people waiting on a big file: datasets done, chunks listed.

The scanner reports to any object with these four methods; :class:`ScanProgress` draws
a tqdm bar on stderr (datasets done of those found, chunks listed so far as a postfix,
so a single dataset of millions of chunks still shows it is moving).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol


class Progress(Protocol):
    def start(self, datasets: int) -> None: ...
    def chunks(self, n: int) -> None: ...
    def dataset_done(self) -> None: ...
    def close(self) -> None: ...


class NoProgress:
    """Reports nothing (the default)."""

    def start(self, datasets: int) -> None:
        pass

    def chunks(self, n: int) -> None:
        pass

    def dataset_done(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScanProgress:
    """A tqdm bar for one scan; the chunk count is redrawn at most every ``interval`` seconds."""

    def __init__(self, label: str, file: Any = None, interval: float = 0.25):
        self.label = label.rstrip("/").rsplit("/", 1)[-1] or label
        self.file = file if file is not None else sys.stderr
        self.interval = interval
        self.listed = 0
        self._bar: Any = None
        self._shown = 0.0

    def start(self, datasets: int) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=datasets, unit="dataset", desc=f"scanning {self.label}", file=self.file,
                         dynamic_ncols=True)

    def chunks(self, n: int) -> None:
        self.listed += n
        now = time.monotonic()
        if self._bar is not None and now - self._shown >= self.interval:
            self._shown = now
            self._bar.set_postfix_str(f"{self.listed:,} chunks listed", refresh=True)

    def dataset_done(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.listed:,} chunks listed", refresh=False)
            self._bar.close()
            self._bar = None
