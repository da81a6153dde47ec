"""Checks an index passes before anyone relies on it: ``safety`` (what may be published and read:
allowed codecs, no credentials, paths inside an allowed root, bounded inline data) and ``compare``
(values read two ways, h5py and zarr, compared exactly: the scan's sample check and ``verify``).
The modules are imported by name; this package imports nothing (``compare`` loads h5py).
"""
