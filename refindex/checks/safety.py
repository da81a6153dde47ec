"""Checks that keep an index safe to publish and to read.

An index is read by people who did not make it, from files nobody vetted, so:
every codec it names must come from an allowlist (nothing that runs code on read,
such as pickle); no credentials end up in it; paths to other files (external links,
external raw storage) stay inside an allowed root unless the user says otherwise;
inline data is bounded for the whole index, not only per dataset.
"""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .. import urls
from ..errors import RefindexError, UnsupportedError

# Codec ids refindex writes.  All decode data only; none can execute code on read.
ALLOWED_CODEC_IDS = frozenset({
    "zlib", "gzip", "shuffle", "fletcher32", "zstd", "bz2", "blosc", "lz4", "astype",
    "vlen-utf8", "vlen-bytes", "vlen-array",
    "imagecodecs_lzf", "imagecodecs_lz4h5", "imagecodecs_szip", "imagecodecs_bitshuffle", "imagecodecs_b2nd",
    "refindex_h5lzf", "refindex_h5lz4", "refindex_h5bitshuffle", "refindex_h5szip", "refindex_h5strpad",
})

# zarr format 3 codec names refindex writes (the v3 forms of the ids above, see refindex.codecs._v3).
ALLOWED_V3_CODECS = frozenset({
    "bytes", "vlen-utf8", "vlen-bytes",
    "numcodecs.zlib", "numcodecs.gzip", "numcodecs.shuffle", "numcodecs.fletcher32", "numcodecs.zstd",
    "numcodecs.bz2", "numcodecs.blosc", "numcodecs.lz4",
    "imagecodecs_lzf", "imagecodecs_lz4h5", "imagecodecs_szip",
    "numcodecs.refindex_h5lzf", "numcodecs.refindex_h5bitshuffle", "numcodecs.refindex_h5strpad",
    "numcodecs.refindex_byteswap", "numcodecs.refindex_b2nd",
})

# Names of storage_options entries that hold secrets (compared in lower case).
_SECRET_KEYS = ("key", "secret", "token", "password", "passwd", "credential", "session", "auth", "sas", "signature")


# ------------------------------------------------------------------ codecs
def _codecs_of(zarray: dict[str, Any]) -> Iterator[dict[str, Any]]:
    comp = zarray.get("compressor")
    if comp is not None:
        yield comp
    for f in zarray.get("filters") or []:
        yield f


def _v3_codecs_of(key: str, doc: Any) -> Iterator[tuple[str, Any]]:
    """(key, codec name) of a zarr v3 array document, and of every array its consolidated metadata holds."""
    if not isinstance(doc, dict):
        return
    if doc.get("node_type") == "array":
        for codec in doc.get("codecs") or []:
            yield key, codec.get("name") if isinstance(codec, dict) else codec
    listed = (doc.get("consolidated_metadata") or {}).get("metadata") if isinstance(
        doc.get("consolidated_metadata"), dict) else None
    if isinstance(listed, dict):
        base = key[: -len("zarr.json")]
        for path, sub in listed.items():
            yield from _v3_codecs_of(f"{base}{path}/zarr.json", sub)


def unsafe_codecs(refs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(array key, codec id) for every codec in ``refs`` that is not on the allowlist
    (zarr v2 ``.zarray`` filters and compressors, zarr v3 ``zarr.json`` codec chains)."""
    bad: list[tuple[str, Any]] = []
    for key, value in (refs.get("refs") or {}).items():
        name = key.rsplit("/", 1)[-1]
        if name == "zarr.json":
            doc = json.loads(value) if isinstance(value, (str, bytes)) else value
            bad += [(k, c) for k, c in _v3_codecs_of(key, doc) if c not in ALLOWED_V3_CODECS]
            continue
        if name != ".zarray":
            continue
        doc = json.loads(value) if isinstance(value, str) else value
        for codec in _codecs_of(doc):
            cid = codec.get("id") if isinstance(codec, dict) else codec
            if cid not in ALLOWED_CODEC_IDS:
                bad.append((key, cid))
    return bad


def check_publishable(head: dict[str, Any], storage_options: dict[str, Any] | None, file: str | None = None) -> None:
    """The gate every index passes before it is written, whatever its format: its metadata names
    only allowed codecs, and nothing from the caller (templates, provenance) carries a secret.

    ``head``: the index without chunk references (``templates``, ``refindex``, and ``refs``
    holding at least every array's metadata document).
    """
    check_codecs(head, file=file)
    check_no_secrets(head, storage_options, file=file)


def check_codecs(refs: dict[str, Any], file: str | None = None) -> None:
    """Refuse an index naming any codec outside the allowlist (e.g. pickle)."""
    bad = unsafe_codecs(refs)
    if bad:
        key, cid = bad[0]
        raise UnsupportedError(f"codec {cid!r} is not on the allowlist of safe codecs ({len(bad)} array(s))",
                               file=file, path="/" + key.rsplit("/", 1)[0] if "/" in key else "/")


# ------------------------------------------------------------------ credentials
def strip_credentials(url: str) -> str:
    """``url`` without any ``user:password@`` part (other URLs and plain paths unchanged)."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


# Query parameters that make a URL a signed, expiring credential (lower case).
_SIGNING_PARAMS = (
    ("x-amz-signature",), ("x-amz-credential",), ("x-amz-security-token",),  # S3 presigned (SigV4)
    ("awsaccesskeyid", "signature"),  # S3 presigned (SigV2)
    ("x-goog-signature",), ("x-goog-credential",),  # GCS signed URLs
    ("sig", "sv"), ("sig", "se"),  # Azure SAS tokens
    ("signature", "key-pair-id"), ("policy", "key-pair-id"),  # CloudFront signed URLs
)


def signing_params(url: str) -> list[str]:
    """The query parameters that make ``url`` a signed (expiring, credential-bearing) URL, if any."""
    if "?" not in url or "://" not in url:
        return []
    names = {k.lower(): k for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    found: list[str] = []
    for group in _SIGNING_PARAMS:
        if all(g in names for g in group):
            found += [names[g] for g in group if names[g] not in found]
    return found


def check_target_url(target: str, explicit: bool) -> None:
    """Refuse to record a presigned source URL in an index, unless the caller chose it as ``url``.

    A signed URL embeds a credential and stops working when it expires, so an index built
    from it would leak the one and soon break; the index should point at the durable URL.
    """
    found = signing_params(target)
    if found and not explicit:
        raise RefindexError(
            f"the source URL is signed ({', '.join(found)}): the index would carry that credential and "
            "break when it expires; pass url= / --url with the durable URL the references should point at "
            "(e.g. s3://bucket/key), or that same signed URL to keep it deliberately",
            file=target.split("?", 1)[0],  # the error itself must not print the credential
        )


def secret_values(storage_options: dict[str, Any] | None) -> list[str]:
    """String values of ``storage_options`` (nested too) whose key names a secret."""
    out: list[str] = []

    def walk(d: Any) -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                if isinstance(v, str) and any(s in str(k).lower() for s in _SECRET_KEYS) and len(v) >= 4:
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(d, (list, tuple)):
            for v in d:
                walk(v)

    walk(storage_options or {})
    return out


def check_no_secrets(refs: dict[str, Any], storage_options: dict[str, Any] | None, file: str | None = None) -> None:
    """Refuse to emit an index whose provenance or URLs contain a secret or ``user:pass@``.

    Only the parts refindex writes from the caller's input are checked (templates and
    the ``refindex`` section); chunk values and pages come from the file itself.
    """
    section = {k: v for k, v in (refs.get("refindex") or {}).items() if k != "pages"}  # the file's own bytes
    head = json.dumps({"templates": refs.get("templates"), "refindex": section}, default=str)
    for secret in secret_values(storage_options):
        if secret in head:
            raise RefindexError("refusing to write an index containing a storage_options secret", file=file)
    for url in (refs.get("templates") or {}).values():
        if strip_credentials(url) != url:
            raise RefindexError("refusing to write an index containing credentials in a URL", file=file)


# ------------------------------------------------------------------ paths
def resolve_inside(name: str, base_url: str, *, allowed_root: str | None = None, allow_outside: bool = False,
                   what: str = "external file", file: str | None = None, path: str | None = None) -> str:
    """``name`` (as written in the file) resolved against the folder of ``base_url``.

    Refused with :class:`UnsupportedError` when the result lies outside ``allowed_root``
    (default: the folder of ``base_url``), unless ``allow_outside``.  Absolute paths,
    ``..`` escapes and URLs to other places are all caught by the same containment test.
    """
    resolved = urls.beside(base_url, name)
    if allow_outside:
        return resolved
    root = urls.normalise(allowed_root) if allowed_root is not None else urls.folder(base_url)
    if not urls.within(resolved, root):
        raise UnsupportedError(
            f"{what} {name!r} resolves to {resolved}, outside the allowed root {root} "
            "(pass allowed_root=... or allow_outside=True / --allow-outside to permit it)",
            file=file, path=path)
    return resolved


# ------------------------------------------------------------------ inline size
def inline_total(tree: Any) -> int:
    """Bytes of inline data the index of ``tree`` will carry (arrays sharing data count each time)."""
    return sum(len(b) for a in tree.arrays.values() for b in a.inline.values())


def check_inline_total(tree: Any, limit: int | None, file: str | None = None) -> None:
    if limit is None:
        return
    total = inline_total(tree)
    if total > limit:
        raise UnsupportedError(
            f"the index would carry {total} bytes of inline data, over the limit of {limit} "
            "(raise max_inline_total / --max-inline-total, or lower inline limits)", file=file)
