"""The concat coordinate across files: decoded per file as xarray decodes it, encoded once for all.

Files written by xarray each carry their own time units (``days since <first day>``), so the
stored numbers of two files mean different instants.  Each file's steps are decoded with its
own units and calendar (xarray's :func:`~xarray.coding.times.decode_cf_datetime`, cftime for
non-standard calendars), held as integers on one scale (nanoseconds since 1970 for numpy
datetimes, microseconds since 1970-01-01 of the calendar for cftime dates) to order and check
the files, and at the end encoded into one coordinate: the files' own numbers when every file
has the same units, calendar and dtype, else integers in the coarsest unit that holds every
step exactly, counted from the earliest step.  The encoding is decoded back and compared
before anything is written: a coordinate that would not read back equal is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RefindexError

# Units from the coarsest, as (name, nanoseconds); cftime dates count microseconds (their resolution).
UNITS = (("days", 86_400 * 10**9), ("hours", 3_600 * 10**9), ("minutes", 60 * 10**9), ("seconds", 10**9),
         ("milliseconds", 10**6), ("microseconds", 10**3), ("nanoseconds", 1))


@dataclass(frozen=True)
class Encoding:
    """How one file stores its steps: equal encodings let the numbers be concatenated as they are."""

    units: str | None
    calendar: str | None
    dtype: str
    kind: str  # "datetime64", "cftime" or "raw" (not a time: ordered by its own numbers)


def cf_times() -> Any:
    """xarray's CF time coding (with cftime for non-standard calendars): what the files' times mean."""
    try:
        from xarray.coding import times
    except ImportError as e:
        raise RefindexError("combining files along a time coordinate decodes each file's times as xarray does: "
                            "pip install 'refindex[combine]' (xarray, cftime)") from e
    return times


def encoding_of(attrs: dict[str, Any], dtype: str) -> Encoding:
    units = attrs.get("units")
    is_time = isinstance(units, str) and " since " in units
    calendar = attrs.get("calendar") if is_time else None
    return Encoding(units if isinstance(units, str) else None, calendar, dtype, "time" if is_time else "raw")


def decode_steps(values: np.ndarray, enc: Encoding, source: str, name: str) -> tuple[np.ndarray, Encoding]:
    """The file's steps as int64 on the shared scale of their kind (and the encoding with its kind set)."""
    if enc.kind == "raw":
        if values.dtype.kind not in "iuf":
            raise RefindexError(f"coordinate {name!r} is neither numbers nor CF times ({values.dtype}): "
                                "cannot order files by it", file=source)
        return values, enc
    try:
        dates = cf_times().decode_cf_datetime(values, enc.units, enc.calendar)
    except Exception as e:  # noqa: BLE001 - xarray/cftime raise many kinds
        raise RefindexError(f"coordinate {name!r}: cannot decode with units {enc.units!r}, calendar "
                            f"{enc.calendar!r}: {e}", file=source) from e
    dates = np.asarray(dates)
    if dates.dtype.kind == "M":
        if np.isnat(dates).any():
            raise RefindexError(f"coordinate {name!r} has missing steps (NaT)", file=source)
        return dates.astype("M8[ns]").view(np.int64), Encoding(enc.units, enc.calendar, enc.dtype, "datetime64")
    cal = dates.flat[0].calendar if dates.size else (enc.calendar or "standard")
    return cftime_micros(dates, cal), Encoding(enc.units, cal, enc.dtype, "cftime")


def cftime_micros(dates: np.ndarray, calendar: str) -> np.ndarray:
    """cftime dates as integer microseconds since 1970-01-01 of their calendar (exact)."""
    import cftime

    ref = cftime.datetime(1970, 1, 1, calendar=calendar)
    out = np.empty(dates.size, dtype=np.int64)
    for i, d in enumerate(dates.flat):
        delta = d - ref
        out[i] = (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds
    return out


def as_dates(steps: np.ndarray, enc: Encoding) -> np.ndarray:
    """Steps on the shared scale back to dates (numpy datetime64[ns] or cftime objects)."""
    if enc.kind == "datetime64":
        return steps.view("M8[ns]")
    import cftime

    ref = cftime.datetime(1970, 1, 1, calendar=enc.calendar)
    return cftime.num2date(steps, f"microseconds since {ref.strftime('%Y-%m-%d %H:%M:%S')}", enc.calendar)


def encode_steps(steps: np.ndarray, enc: Encoding, name: str) -> tuple[np.ndarray, str]:
    """All steps (in order) as int64 in ``<unit> since <earliest step>``: (values, units)."""
    times = cf_times()
    scale = 1 if enc.kind == "datetime64" else 1000  # nanoseconds per step unit of the shared scale
    deltas = (steps - steps[0]) * scale
    step = math.gcd(*(int(d) for d in np.unique(deltas))) if len(deltas) > 1 else UNITS[0][1]
    unit = next(u for u, ns in UNITS if step % ns == 0)
    dates = as_dates(steps, enc)
    first = dates[0]
    if enc.kind == "datetime64":
        import pandas as pd

        origin = pd.Timestamp(first).isoformat(sep=" ")
    else:
        origin = first.isoformat(sep=" ")
    units = f"{unit} since {origin}"
    values, units, _ = times.encode_cf_datetime(dates, units, enc.calendar, dtype=np.dtype("int64"))
    back = np.asarray(times.decode_cf_datetime(values, units, enc.calendar))
    if back.shape != dates.shape or not np.all(back == dates):
        raise RefindexError(f"coordinate {name!r}: its steps do not read back equal once encoded in {units!r} "
                            f"(calendar {enc.calendar!r}); refusing to write a coordinate that reads otherwise")
    return np.asarray(values, dtype=np.int64), units
