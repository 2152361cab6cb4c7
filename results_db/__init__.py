"""Results: the numbers people compare, computed from what the workers recorded.

``analytics`` holds the definitions (time-to-accuracy, speedup, communication
ratio, all-reduce bandwidth, repeats) as small pure functions.
"""
