"""What a store says about a file's version: size, ETag, version id, modification time.

Every fsspec backend spells these its own way (``ETag`` in an HTTP or S3 ``info``,
``Last-Modified`` as an HTTP header, ``LastModified`` in s3fs, ``last_modified`` in adlfs,
``updated``/``generation`` in gcsfs, ``mtime`` locally and over sftp, ``modify`` over ftp ...).
:func:`described` turns any of them into the few fields an index records, and
:func:`mtime_epoch` reads any spelling of a time as seconds since the epoch, so a time
recorded from a listing compares with one from a HEAD request.
"""

from __future__ import annotations

import datetime as _dt
from email.utils import parsedate_to_datetime
from typing import Any

# In order of preference: the first one present wins.
ETAG_KEYS = ("ETag", "etag", "Etag", "e_tag", "md5Hash", "content_md5")
VERSION_KEYS = ("VersionId", "version_id", "versionId", "generation")
MTIME_KEYS = ("mtime", "LastModified", "Last-Modified", "last-modified", "last_modified", "updated", "modified",
              "modify", "modification_time")


def described(info: dict[str, Any]) -> dict[str, Any]:
    """``{"size", "etag"?, "version"?, "mtime"?}`` from an fsspec ``info`` or listing entry.

    ``mtime`` keeps the store's own form where it is a number (local files: the float the
    filesystem gives, sub-second), else ISO 8601 text; compare times with :func:`same_mtime`.
    """
    out: dict[str, Any] = {"size": int(info.get("size") or 0)}
    etag = _first(info, ETAG_KEYS)
    if etag is not None:
        out["etag"] = _etag_text(etag)
    version = _first(info, VERSION_KEYS)
    if version is not None and str(version) not in ("null", "None"):
        out["version"] = str(version)
    mtime = _first(info, MTIME_KEYS)
    if mtime is not None:
        out["mtime"] = _mtime_value(mtime)
    return out


# Stores whose ETag of an object written in one request (no multipart, no KMS encryption) is the MD5 of its bytes.
CONTENT_MD5_ETAG_PROTOCOLS = frozenset({"s3", "s3a"})


def etag_follows_content(protocol: str) -> bool:
    """Does ``protocol``'s store give an object written in one request the MD5 of its bytes as ETag?"""
    return protocol in CONTENT_MD5_ETAG_PROTOCOLS


def content_etag(protocol: str, data: bytes) -> str | None:
    """The ETag (as :func:`described` gives it) an object of exactly ``data`` has on ``protocol``'s store when it
    was written in one request; None where the store's ETags do not follow its bytes.  An object it does not
    match (written in parts, encrypted with KMS, changed) is simply another object to whoever compares."""
    if not etag_follows_content(protocol):
        return None
    import hashlib

    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return value
    return None


def _etag_text(value: Any) -> str:
    """An ETag without its quotes (a weak one keeps its ``W/``)."""
    text = str(value).strip()
    weak = text.startswith("W/")
    inner = text[2:] if weak else text
    return ("W/" if weak else "") + inner.strip('"')


def _mtime_value(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    epoch = mtime_epoch(value)
    if epoch is None:
        return str(value)
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat()


def mtime_epoch(value: Any) -> float | None:
    """Seconds since the epoch of a time in any form a store or an index gives (None: not a time)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, _dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)).timestamp()
    text = str(value).strip()
    for parse in (_iso, _http_date, _ftp_time, float):
        try:
            got = parse(text)
        except (ValueError, TypeError, OverflowError, IndexError):
            continue
        if got is not None:
            return float(got)
    return None


def _iso(text: str) -> float:
    moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)).timestamp()


def _http_date(text: str) -> float:
    return parsedate_to_datetime(text).timestamp()


def _ftp_time(text: str) -> float:  # MLSD "modify" facts: YYYYMMDDHHMMSS[.sss]
    if len(text) < 14 or not text[:14].isdigit():
        raise ValueError(text)
    moment = _dt.datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp() + (float(text[14:]) if text[14:] else 0.0)


def fine_grained(value: Any) -> bool:
    """Does this time tell apart two writes within the same second (a local file's float mtime)?

    HTTP dates, S3 and most object stores give whole seconds: a file rewritten in the second
    it was indexed keeps its time, so such a time alone never proves a file unchanged.
    """
    epoch = mtime_epoch(value)
    return epoch is not None and epoch != int(epoch)


def same_mtime(a: Any, b: Any) -> bool | None:
    """Do two recorded times name the same moment (None: one of them is not a time)?

    A time with sub-second digits and one in whole seconds (a listing and a HEAD request
    of the same object) are compared to the second.
    """
    ea, eb = mtime_epoch(a), mtime_epoch(b)
    if ea is None or eb is None:
        return None
    if ea == eb:
        return True
    if ea == int(ea) or eb == int(eb):
        return int(ea) == int(eb)
    return False
