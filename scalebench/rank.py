"""What a rank accepts and how it answers: backends, precisions, seeds, timeouts, exit statuses.

A rank is one ``python -m workers.run`` process of a group. The sweep's plan
(:meth:`scalebench.sweep.GroupPlan.worker_argv`) gives it the request fields
declared ``to_ranks``; the launcher adds the paths *it* sees.

A rank answers with its exit status (``EXIT_*``): 0 finished (goal reached,
epoch limit, or measurements done), 1 failed (a peer died, a timeout, an
error), 2 refused input (nothing started), 3 diverged, 4 no space left on the
results filesystem, 143 terminated by SIGTERM. The command line uses the same
numbers (0, 1 a group or a load did not succeed, 2 refused: a setting, the
database or a folder) and 130 when interrupted. Torch-free: the Airflow side builds these.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_DIVERGED, EXIT_TERMINATED = 0, 1, 2, 3, 143
EXIT_INTERRUPTED = 130  # the command line, stopped by Ctrl-C
EXIT_NO_SPACE = 4  # a rank whose results filesystem filled up (scalebench.diskspace)
# Arithmetic of the training step: fp32, or bf16 (forward and loss under bfloat16
# autocast, fp32 weights and optimizer). A task's spec says which of them it offers.
PRECISIONS = ("fp32", "bf16")
# The torch.distributed backends a group can use.
BACKENDS = ("gloo", "nccl", "mpi")
DEFAULT_PRECISION = "fp32"
# Set by the local launcher to its own process id: a rank whose launcher is gone stops.
LAUNCHER_PID_VARIABLE = "SCALEBENCH_LAUNCHER_PID"
MAX_SEED = 2**63 - 1  # torch seeds are signed 64-bit integers
# A collective must be given long enough to form the group, and no longer than
# a process group can count (a week is far below that and above any task's need).
MIN_COLLECTIVE_TIMEOUT_S = 1.0
MAX_COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600.0
