"""scalebench: time-to-accuracy, speedup, communication ratio and cost as workers are added."""

__version__ = "0.1.0"
