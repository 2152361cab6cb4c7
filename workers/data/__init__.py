"""Data sets: where they live on disk and how they load (``sources``, ``text``,
``translation``), whether they are there (``availability``, raising ``errors``'
:class:`DataSetMissing`), getting them ready (``prepare``) and how batches are
cut (``batches``)."""
