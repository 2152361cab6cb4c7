"""Models of the benchmark tasks, written out plainly."""
