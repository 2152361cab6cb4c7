"""The GPU check (``scripts/gpu-check.sh``, ``python -m workers.gpu_check``): every GPU path of
the workers, verified in minutes on light data, with figures against the device's own limits.

``measure`` holds the instruments, ``probe`` one watched training run, ``checks`` the checks and
their verdicts, ``report`` the report. See docs/gpu-check.md.
"""
