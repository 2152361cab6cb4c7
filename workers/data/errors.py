"""The error every data set loader raises when its files are not on disk.

It lives in a module of its own, importing nothing, so that the per-format
modules (:mod:`workers.data.sources`, :mod:`workers.data.text`,
:mod:`workers.data.translation`) and the modules above them
(:mod:`workers.data.availability`, :mod:`workers.data.prepare`) can all raise
and catch it without importing one another.
"""


class DataSetMissing(FileNotFoundError):
    """A full data set is not where the task expects it."""
