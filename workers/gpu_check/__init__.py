"""The GPU check (``scripts/gpu-check.sh``, ``python -m workers.gpu_check``): every GPU path of
the workers, verified in minutes on light data, with figures against the device's own limits.

``measure`` holds the instruments, ``probe`` one watched training run, ``context`` what every
check is given and how it runs a child process; the checks and their verdicts are ``machine``
(facts and matmul peaks), ``task0`` (Task 0 on CUDA tensors) and ``checks`` (the watched training
runs); ``report`` the report. See docs/gpu-check.md.
"""
