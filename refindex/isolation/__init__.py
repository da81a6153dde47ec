"""Process isolation: libhdf5 work on untrusted files in processes that can be stopped.

``worker`` (a fresh interpreter that runs jobs, with a time limit and a stall watch), ``forked``
(one call in a forked child, for the command line), ``lifetime`` (children that end with their
parent and clean up after themselves) and ``gcpause`` (when garbage collection is held: while an
index opens, and while libhdf5 waits for bytes other threads fetch).  The modules are imported by
name; this package imports nothing, so ``refindex.isolation.gcpause`` stays light.
"""
