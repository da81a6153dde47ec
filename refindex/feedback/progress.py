"""Progress of long work (a scan, a batch), for people waiting on it, drawn where they look.

A setting says when: ``True`` always, ``False``/``None`` never, ``"auto"`` (the Python API's
default) only in a Jupyter notebook and only once the work has run :data:`AUTO_DELAY` seconds,
so quick calls print nothing.  :func:`progress_bar` then draws it for where it goes:

* in a notebook, tqdm's notebook widget (``tqdm.auto``; its text bar without ipywidgets);
* on a terminal, tqdm's text bar, redrawn in place;
* anywhere else (a log file, a pipe, a batch job's output): one plain line every
  :data:`LINE_INTERVAL` seconds and a last one at the end (:class:`LineProgress`) — never
  carriage-return redraws, which turn a log into one endless line.

The scanner reports to any object with the four methods of :class:`Progress`;
:class:`ScanProgress` turns them into a bar (datasets done of those found, chunks listed so
far as a postfix, so a single dataset of millions of chunks still shows it is moving).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Any, Literal, Protocol, TextIO, Union

AUTO_DELAY = 2.0  # seconds of work before an "auto" bar appears
LINE_INTERVAL = 10.0  # seconds between two lines of a LineProgress


class Progress(Protocol):
    def start(self, datasets: int) -> None: ...
    def chunks(self, n: int) -> None: ...
    def dataset_done(self) -> None: ...
    def close(self) -> None: ...


ProgressSetting = Union[bool, Literal["auto"], Progress, None]


def in_notebook() -> bool:
    """True in a Jupyter kernel (notebook, JupyterLab, VS Code), where output is rendered, not a terminal."""
    if "ipykernel" not in sys.modules:
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "zmq" in type(shell).__name__.lower()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_bar(total: int | None, *, desc: str, unit: str, setting: ProgressSetting = True,
                 file: TextIO | None = None, interval: float = LINE_INTERVAL, **tqdm_args: Any) -> Any:
    """A bar with tqdm's ``update``/``set_postfix``/``set_postfix_str``/``close``, or None for no bar."""
    if setting is None or setting is False:
        return None
    notebook = in_notebook()
    if setting == "auto" and not notebook:
        return None
    delay = AUTO_DELAY if setting == "auto" else 0.0
    stream = file if file is not None else sys.stderr
    if notebook and file is None:
        with warnings.catch_warnings():  # without ipywidgets tqdm.auto falls back to its text bar, and says so
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
        return tqdm(total=total, desc=desc, unit=unit, delay=delay, **tqdm_args)
    if _is_terminal(stream):
        from tqdm.std import tqdm as text_bar

        return text_bar(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, delay=delay, **tqdm_args)
    return LineProgress(total, desc=desc, unit=unit, file=stream, interval=interval, delay=delay)


class LineProgress:
    """Progress as whole lines (``desc: 12/40 files, 3.1 files/s, about 9 s left``) for logs and pipes."""

    def __init__(self, total: int | None, *, desc: str, unit: str, file: TextIO, interval: float = LINE_INTERVAL,
                 delay: float = 0.0):
        self.total, self.desc, self.unit, self.file, self.interval = total, desc, unit, file, interval
        self.n = 0
        self.postfix = ""
        self.start = time.monotonic()
        self.last = self.start + delay - interval  # the first line once ``delay`` has passed
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        self._maybe_print()

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s
        if refresh:
            self._maybe_print()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in values.items()), refresh)

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        parts = [f"{self.n:,}/{self.total:,} {self.unit}s" if self.total else f"{self.n:,} {self.unit}s"]
        if self.postfix:
            parts.append(self.postfix)
        rate = self.n / elapsed if elapsed > 0 else 0.0
        parts.append(f"{elapsed:.0f} s" if self.closed else f"{rate:.1f} {self.unit}s/s")
        if not self.closed and self.total and rate > 0:
            parts.append(f"about {(self.total - self.n) / rate:.0f} s left")
        return f"{self.desc}: " + ", ".join(parts)

    def _maybe_print(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            print(self.line(), file=self.file, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            print(self.line(), file=self.file, flush=True)


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
    """A bar for one scan (see :func:`progress_bar`); the chunk count is redrawn at most every ``interval`` s."""

    def __init__(self, label: str, file: Any = None, interval: float = 0.25, setting: ProgressSetting = True):
        self.label = label.rstrip("/").rsplit("/", 1)[-1] or label
        self.file = file
        self.interval = interval
        self.setting = setting
        self.listed = 0
        self._bar: Any = None
        self._shown = 0.0

    @classmethod
    def of(cls, setting: ProgressSetting, label: str) -> Progress | None:
        """What a scan reports to under ``setting``: None, a ScanProgress, or the caller's own object."""
        if setting is None or setting is False or (setting == "auto" and not in_notebook()):
            return None
        if setting is True or setting == "auto":
            return cls(label, setting=setting)
        return setting

    def start(self, datasets: int) -> None:
        self._bar = progress_bar(datasets, desc=f"scanning {self.label}", unit="dataset", setting=self.setting,
                                 file=self.file)

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


# ---------------------------------------------------------------- the pulse a watching parent follows
#
# libhdf5 can loop forever on a damaged file, and it does so inside one call that holds the
# interpreter (h5py keeps the GIL in its metadata calls; it lets go of it while reading data).
# The time limit of an isolated scan (refindex.options.time_limit) is sized for the largest
# healthy file of that size, so a small file that loops would hold its worker for a minute.  So,
# while a scan is *watched* (:func:`watch`: from the source's opening to the end of the walk), a
# thread of the worker sends its parent (refindex.isolation.worker, refindex.isolation.forked) a pulse every
# :data:`PULSE_INTERVAL` seconds.  It gets to run whenever the scan runs Python code, waits for
# bytes or reads data; it cannot while libhdf5 holds the interpreter in one call.  The parent
# stops a watched worker whose pulse stops for the stall limit.  Nothing of this runs outside a
# worker that has a watcher (:func:`set_watcher`).

PULSE_INTERVAL = 0.5  # seconds between two pulses of a watched worker
_watcher: Any = None  # callable(limit: float) -> None, set in a worker; limit 0: not watched any more
_limit = 0.0  # the stall limit of the phase being watched (0: none)
_pulsing: Any = None  # the thread that sends the pulses (started with the first watch)


def set_watcher(send: Any) -> None:
    """In a worker: ``send(limit)`` tells the parent "still here, stall limit ``limit`` s" (0: stop
    watching).  None removes it (a forked child of the worker never pulses for it)."""
    global _watcher, _limit, _pulsing
    _watcher, _limit, _pulsing = send, 0.0, None


def watch(limit: float | None) -> None:
    """Start watching this phase with a stall limit of ``limit`` seconds (None or 0: stop watching)."""
    global _limit, _pulsing
    if _watcher is None:
        return
    _limit = float(limit or 0.0)
    _watcher(_limit)
    if _limit and _pulsing is None:
        import threading

        _pulsing = threading.Thread(target=_pulse, args=(_watcher,), name="refindex-pulse", daemon=True)
        _pulsing.start()


def _pulse(send: Any) -> None:
    while _watcher is send:
        time.sleep(PULSE_INTERVAL)
        if _limit and _watcher is send:
            send(_limit)


if hasattr(os, "register_at_fork"):  # a helper the scan forks (the split walk) never pulses for it
    os.register_at_fork(after_in_child=lambda: set_watcher(None))
