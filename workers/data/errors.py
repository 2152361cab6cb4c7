"""The errors of data sets: missing files, and files that are there but wrong.

It lives in a module of its own, importing nothing, so that the per-format
modules (:mod:`workers.data.sources`, :mod:`workers.data.text`,
:mod:`workers.data.translation`) and the modules above them
(:mod:`workers.data.availability`, :mod:`workers.data.prepare`) can all raise
and catch it without importing one another.
"""


class DataSetMissing(FileNotFoundError):
    """A full data set is not where the task expects it."""


class DataSetCorrupt(ValueError):
    """A data set file with the wrong checksum, format or size."""
