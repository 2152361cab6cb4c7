"""The entry points on top of everything: the ``scalebench`` command and the embedded runner."""
