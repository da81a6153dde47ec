"""Looking at an index: ``info`` (a summary, ``_info``), ``notes`` (refindex's own notes on a node,
``_notes``), the hierarchy as a Zarr Object Model and checks against templates (``_schema``), and
``verify`` (every dataset read through the index against h5py's read of the file, ``_verify``).
Names load on first use.
"""

from ...lazy import attribute_loader

_WHERE = {
    "info": "_info",
    "notes": "_notes",
    "CheckReport": "_schema", "check": "_schema", "dumps": "_schema", "load_metadata": "_schema",
    "load_template": "_schema", "object_model": "_schema",
    "VerifyReport": "_verify", "verify": "_verify",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
