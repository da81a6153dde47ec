"""Share the walk of a file of many objects with a forked helper process.

libhdf5 serves one call at a time, and a file of many small objects (an NWB file of
hundreds of series) spends most of its scan in per-object calls: attributes, dataset
properties, layouts.  Once the file's metadata is cached, a forked copy of this process
can visit half of the groups while this one visits the others.

The helper can only make the walk faster, never wrong and never stuck:

- it takes groups from the end of the list while this process takes them from the front;
  each group it finishes comes back through a pipe as the pickle of that group's part of
  the tree (the same visit, the same code), and this process stops where the two meet;
- this process never waits for it: when the helper fails, stalls or dies (a read its
  cache cannot serve, since the copy of the event loop that would fetch it does not run
  in a fork; a lock another thread held at the fork), this process visits what is left;
- only files read through refindex's own file object (the remote block cache) are
  split: each process then reads through its own copy of it.  A local file's
  descriptor would be shared between the two.

``ScanOptions.split_walk``: None (default) splits remote files of at least
:data:`MIN_GROUPS` groups on Linux machines of two or more cores; True whenever
possible; False never (batch indexing, whose workers keep every core busy already).
A fork behind the caller's back is acceptable here, unlike for ``isolate``, because
nothing depends on the child: the caller's threads, event loops and locks cannot stall
the scan, and the child writes nowhere but to its pipe (its stdout and stderr go to
``/dev/null``) and is killed when the walk is done.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import warnings
from typing import Callable, NoReturn

from ..isolation.lifetime import die_with_parent, silenced
from ..model import Tree
from ..feedback.progress import NoProgress
from ._context import ScanContext
from .chunkindex import IndexStats

MIN_GROUPS = 32  # fewer groups: the fork and the pickles cost about what the helper saves
_HEADER = struct.Struct("<IIQ")  # one message: group index, datasets done, pickle length; then the pickle

Visit = Callable[[ScanContext, str], None]


def split_worthwhile(ctx: ScanContext, groups: list[str]) -> bool:
    """Should this scan share its walk of ``groups`` with a helper process?"""
    choice = ctx.opts.split_walk
    if choice is False or not hasattr(os, "fork") or getattr(ctx.f, "driver", None) != "fileobj" or not ctx.remote:
        return False
    if choice is None:  # Linux only: elsewhere fork without exec is less safe (macOS) or absent
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return sys.platform.startswith("linux") and cores >= 2 and len(groups) >= MIN_GROUPS
    return True


def walk_split(ctx: ScanContext, groups: list[str], visit: Visit) -> bool:
    """``visit`` every group of ``groups``, here and in a forked helper, into ``ctx``.

    False, having visited nothing, when no helper could be started.
    """
    parent = os.getpid()
    try:
        r, w = os.pipe()
    except OSError:
        return False
    try:
        with warnings.catch_warnings():
            # Python warns that forking a process with threads may deadlock the child: the
            # helper is never waited for (see the module docstring).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:  # no memory for a copy, too many processes
        os.close(r)
        os.close(w)
        return False
    if pid == 0:  # the helper: whatever happens, it ends here, never back in the caller's code
        try:
            os.close(r)
            die_with_parent(parent)  # a scan killed for its time limit takes its helper along
            _help(ctx, groups, visit, w)
        finally:
            os._exit(1)
    os.close(w)
    try:
        _lead(ctx, groups, visit, r)
    finally:
        os.close(r)
        _stop(pid)
    return True


class _Counted(NoProgress):
    """The helper's progress: datasets done, reported with each group."""

    def __init__(self) -> None:
        self.done = 0

    def dataset_done(self) -> None:
        self.done += 1


def _help(ctx: ScanContext, groups: list[str], visit: Visit, w: int) -> NoReturn:
    """The helper: visit groups from the last one backwards, send each group's part of the tree."""
    code = 1
    try:
        silenced(1, 2)  # warnings, libhdf5 messages, progress bars: the parent's to show
        counted = _Counted()
        ctx.progress = counted
        if ctx.recorder is not None:
            ctx.recorder.take()  # what was read before the fork is the parent's already
        root_id, url = ctx.tree.root_object_id, ctx.tree.url
        for i in range(len(groups) - 1, -1, -1):
            part = Tree(url=url, root_object_id=root_id)
            ctx.tree, ctx.deferred, counted.done, ctx.index_stats = part, [], 0, IndexStats()
            visit(ctx, groups[i])
            msg = pickle.dumps((part.groups, part.arrays, part.links, part.skipped,
                                part.provenance.get("omitted", []), ctx.deferred, ctx.phony.get(groups[i]),
                                ctx.index_stats, ctx.recorder.take() if ctx.recorder is not None else None, part.reads_elsewhere,
                                part.copied),
                               protocol=pickle.HIGHEST_PROTOCOL)
            _write_all(w, _HEADER.pack(i, counted.done, len(msg)) + msg)
        code = 0
    except BaseException:  # noqa: BLE001 - the parent visits whatever was not delivered
        pass
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _lead(ctx: ScanContext, groups: list[str], visit: Visit, r: int) -> None:
    """This process: visit groups from the front until it meets what the helper delivered."""
    os.set_blocking(r, False)
    inbox = _Inbox(r, len(groups))
    i = 0
    while i < inbox.front:
        for _ in range(inbox.read(i)):  # the helper's progress shows as it comes
            ctx.progress.dataset_done()
        if i >= inbox.front:
            break
        visit(ctx, groups[i])
        i += 1
    for k in sorted(inbox.parts):
        if k >= i:  # the helper's; groups this process visited too keep this process's visit
            _merge(ctx, groups[k], inbox.parts[k])


class _Inbox:
    """The helper's messages as they arrive: ``front`` is the first group of the delivered tail."""

    def __init__(self, fd: int, n: int) -> None:
        self.fd, self.front = fd, n
        self.buf = bytearray()
        self.parts: dict[int, bytes] = {}
        self.open = True

    def read(self, mine: int) -> int:
        """Take what has arrived; the datasets done in the groups that came whole, except
        groups before ``mine`` (this process visited those itself)."""
        done = 0
        while self.open:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not data:  # the helper is done, gave up or died: what arrived whole counts
                self.open = False
                break
            self.buf += data
        while len(self.buf) >= _HEADER.size:
            index, datasets, length = _HEADER.unpack_from(self.buf)
            if len(self.buf) < _HEADER.size + length:
                break
            if index == self.front - 1:  # the helper goes strictly backwards
                self.parts[index] = bytes(self.buf[_HEADER.size : _HEADER.size + length])
                self.front = index
                done += datasets if index >= mine else 0
            del self.buf[: _HEADER.size + length]
        return done


def _merge(ctx: ScanContext, path: str, payload: bytes) -> None:
    groups, arrays, links, skipped, omitted, deferred, phony, index_stats, reads, elsewhere, copied = pickle.loads(payload)
    ctx.index_stats.merge(index_stats)
    tree = ctx.tree
    tree.groups.update(groups)
    tree.arrays.update(arrays)
    tree.links.extend(links)
    tree.skipped.extend(skipped)
    tree.reads_elsewhere.extend(elsewhere)
    tree.copied.extend(copied)  # compact datasets' data: holes of the pages
    if omitted:
        tree.provenance.setdefault("omitted", []).extend(omitted)
    ctx.deferred.extend(deferred)
    if phony is not None:
        ctx.phony[path] = phony
    if reads is not None and ctx.recorder is not None:  # the pages of the index need what the helper read
        ctx.recorder.add(reads)


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
