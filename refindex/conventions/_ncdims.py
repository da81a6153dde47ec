"""Dimension names as netCDF readers give them: h5netcdf's rules, from the facts the scanner recorded.

xarray over an HDF5 file (``engine="h5netcdf"``) names each variable's dimensions this way,
so the plain convention writes the same names into ``_ARRAY_DIMENSIONS`` (v2) /
``dimension_names`` (v3).  The rules, per group as xarray opens it (the root, then each
group down the path, each adding its dimensions to those of its ancestors):

* a member whose ``CLASS`` is ``DIMENSION_SCALE`` is a dimension named like the member
  (a linked scale too: one object, several dimensions); its id is ``_Netcdf4Dimid``, else
  the count of dimensions met so far;
* axes without a scale get phony dimensions: per group, for each axis size (in the order
  sizes are first met) as many as the most axes of that size one variable has, less the
  group's fixed-size dimensions of that size; numbered ``phony_dim_N`` by one counter over
  the root and the groups down the path;
* a scale with ``_Netcdf4Coordinates`` takes the dimensions those ids name (the last
  dimension of an id wins); a variable with scales on every axis takes, per axis, the
  name libhdf5 gives the *last* scale attached; a scale is its own dimension; any other
  variable takes, per axis, the group's dimensions of that axis's size in turn.

Where h5netcdf would fail (an id that names no dimension, axes mixing scales and none), the
scan's own names are kept: xarray cannot open that group over the file either.
"""

from __future__ import annotations

from collections import ChainMap, Counter
from dataclasses import dataclass

from ..model import NcMember, Tree, join


@dataclass
class _Dim:
    name: str
    size: int
    dimid: object  # _Netcdf4Dimid, the running count, or False for a phony dimension (as h5netcdf keys them)
    fixed_size: int | None  # None: unlimited (never offsets phony dimensions)


@dataclass
class _State:
    dims: ChainMap
    phony_count: int
    max_dim_id: int


class _Unnamed(Exception):
    """h5netcdf cannot name this variable's dimensions."""


def netcdf_dimension_names(tree: Tree) -> dict[str, list[str]]:
    """Array path -> its dimension names as h5netcdf gives them, for every array whose group
    (and ancestors) the scanner recorded facts for."""
    states: dict[str, _State | None] = {}
    out: dict[str, list[str]] = {}
    for path in sorted(tree.groups, key=lambda p: p.count("/") if p != "/" else 0):
        state = _state_of(tree, path, states)
        members = tree.groups[path].nc_members
        if state is None or members is None:
            continue
        for m in members:
            if m.dimension_only or m.shape is None:
                continue
            try:
                out[join(path, m.name)] = list(_lookup(m, state))
            except (_Unnamed, KeyError, IndexError, TypeError):
                continue
    return out


def _state_of(tree: Tree, path: str, states: dict[str, _State | None]) -> _State | None:
    """The dimensions in scope in group ``path`` and the counters after it, as h5netcdf builds them."""
    if path in states:
        return states[path]
    if path == "/":
        parent: _State | None = _State(ChainMap(), 0, -1)
    else:
        up = path.rsplit("/", 1)[0] or "/"
        parent = _state_of(tree, up, states) if up in tree.groups else None
    group = tree.groups.get(path)
    if parent is None or group is None or group.nc_members is None:
        states[path] = None
        return None
    states[path] = _group_state(group.nc_members, parent)
    return states[path]


def _group_state(members: list[NcMember], parent: _State) -> _State | None:
    own: dict[str, _Dim] = {}
    phony: Counter = Counter()
    max_dim_id, count = parent.max_dim_id, parent.phony_count
    for m in members:
        if m.scale:
            max_dim_id += 1
            own[m.name] = _Dim(m.name, m.size, m.dimid if m.dimid is not None else max_dim_id,
                               None if m.unlimited else m.size)
        elif m.shape is not None:
            try:
                if _labels(m) == "unlabeled":
                    phony |= Counter(m.shape)
            except _Unnamed:
                return None  # h5netcdf refuses the whole group
    labeled = Counter(d.fixed_size for d in own.values())
    for size, n in phony.items():
        for _ in range(labeled[size], n):
            name = f"phony_dim_{count}"
            count += 1
            own[name] = _Dim(name, size, False, size)
    return _State(parent.dims.new_child(own), count, max_dim_id)


def _labels(m: NcMember) -> str:
    """h5netcdf's verdict on a variable's scales: "nodim" (0-d), "unlabeled" (none), "labeled" (every axis)."""
    if not m.shape:
        return "nodim"
    counts = {len(s) for s in m.scales} if m.scales is not None else {0}
    if len(m.scales or []) not in (0, len(m.shape)):
        raise _Unnamed("DIMENSION_LIST does not match the rank")
    if counts == {0}:
        return "unlabeled"
    if 0 in counts:
        raise _Unnamed("axes mixing scales and none")
    return "labeled"


def _lookup(m: NcMember, state: _State) -> tuple[str, ...]:
    if m.coordinates is not None and m.scale:
        order = {d.dimid: key for key, d in state.dims.items()}
        return tuple(order[c] for c in m.coordinates)
    if m.scales is not None and _labels(m) == "labeled":
        return tuple(axis[-1] for axis in m.scales)
    if m.name in state.dims:
        return (m.name,)
    here = list(state.dims.maps[0].values())
    used: Counter = Counter()
    names = []
    for size in m.shape or ():
        names.append([d.name for d in here if d.size == size][used[size]])
        used[size] += 1
    return tuple(names)


def name_dimensions(tree: Tree) -> None:
    """Write h5netcdf's dimension names into every array's ``_ARRAY_DIMENSIONS`` where the scan recorded
    what they come from (in place): xarray over the index then names them as over the file."""
    for path, dims in netcdf_dimension_names(tree).items():
        node = tree.arrays.get(path)
        if node is not None and len(dims) == len(node.shape):
            node.attrs["_ARRAY_DIMENSIONS"] = dims
