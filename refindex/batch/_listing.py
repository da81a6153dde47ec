"""What an object store's listing tells a batch without one request per file.

A re-run over thousands of objects must know each one's size, ETag and mtime (is it unchanged?)
and whether its index exists.  One HEAD per file is thousands of round trips; an S3 / GCS / Azure
listing returns those fields for 1,000 objects a request.  So the files of a folder (a prefix)
that holds many of a batch's inputs or indexes are described from one listing of that folder;
a few files alone in a folder keep their HEAD (listing a large prefix for them would cost more).
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import urls

# Stores whose listing entries carry size, ETag and last-modified time (HTTP servers' "listings"
# are HTML pages of links: no such fields).
LISTED_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})
# Files of one folder from which a listing of the folder replaces their HEAD requests.
LIST_AT_LEAST = 8


def listed(locations: list[str], storage_options: dict[str, Any] | None,
           at_least: int = LIST_AT_LEAST) -> dict[str, dict[str, Any] | None]:
    """The listing entry (fsspec detail) of each location in a listed folder, None for those the
    listing shows absent; locations not covered (local, a store without listings, a folder with
    fewer than ``at_least`` of them, a listing that failed) are left out: ask them one by one."""
    folders: dict[str, list[str]] = defaultdict(list)
    for loc in locations:
        protocol, path = urls.split(loc)
        if protocol in LISTED_PROTOCOLS and "/" in path.strip("/"):
            folders[urls.join(protocol, path.rstrip("/").rsplit("/", 1)[0])].append(loc)
    chosen = [(folder, members) for folder, members in folders.items() if len(members) >= at_least]
    out: dict[str, dict[str, Any] | None] = {}
    if not chosen:
        return out
    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as ex:
        for members, entries in zip((m for _, m in chosen),
                                    ex.map(lambda fm: _entries(fm[0], storage_options), chosen)):
            if entries is None:
                continue
            for loc in members:
                out[loc] = entries.get(urls.split(loc)[1].rstrip("/"))
    return out


def _entries(folder: str, storage_options: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """Name -> entry of everything directly in ``folder`` (paginated by the store: 1,000 a request)."""
    try:
        fs, path = urls.filesystem(folder, storage_options)
        fs.invalidate_cache(path)  # an earlier listing in this process may be stale
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:  # nothing under that prefix (a first run's empty output): every location absent
        return {}
    except Exception:  # noqa: BLE001 - no listing: HEAD requests instead
        return None
    return {e["name"].rstrip("/"): e for e in entries if isinstance(e, dict) and e.get("name")}
