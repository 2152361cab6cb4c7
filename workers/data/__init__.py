"""Data sets: where they live on disk and how they load (``sources``, ``text``,
``translation``), which files make them, and whether they are there, is
:mod:`scalebench.datasets`), getting them ready (``prepare``) and how batches are
cut (``batches``)."""
