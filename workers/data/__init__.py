"""Data sets: where they live on disk (``sources``) and how batches are cut (``batches``)."""
