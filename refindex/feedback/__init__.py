"""What people see of refindex's work: ``progress`` (bars drawn where they look while a scan or a
batch runs: a notebook widget, a terminal bar, plain lines in logs) and ``display`` (the small HTML
tables notebooks show for reports, summaries and read statistics).  The modules are imported by
name; this package imports nothing.
"""
