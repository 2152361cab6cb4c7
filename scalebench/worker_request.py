"""What one rank of a planned group is asked to do, as fields.

A sweep plans one :class:`WorkerRequest` per group; each launcher turns it
into the ``python -m workers.run`` command line with the paths *it* sees:
the local launcher with the host's results and data directories, the
Kubernetes launcher with its pods' mount points. Nothing renders a command
line and parses it back.

A rank answers with its exit status (``EXIT_*``): 0 finished (goal reached,
epoch limit, or measurements done), 1 failed (a peer died, a timeout, an
error), 2 refused input (nothing started), 3 diverged, 143 terminated by
SIGTERM. The command line uses the same numbers (0, 1 a group or a load did
not succeed, 2 refused: a setting, the database or a folder) and 130 when
interrupted. Torch-free: the Airflow side builds these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from scalebench.network import HOST_PROFILE, NetworkProfile, parse_profile

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_DIVERGED, EXIT_TERMINATED = 0, 1, 2, 3, 143
EXIT_INTERRUPTED = 130  # the command line, stopped by Ctrl-C
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


@dataclass(frozen=True)
class WorkerRequest:
    """The inputs of ``python -m workers.run`` that do not depend on where it runs.

    ``training`` is false for the all-reduce task, which has no training
    variant, precision or compile setting (they are not passed).
    """

    task: str
    run_id: str
    light: bool
    backend: str
    collective_timeout_s: float
    seed: int
    training: bool = True
    variant: str = "sync"
    precision: str = DEFAULT_PRECISION
    compile: str = "off"
    device: str = "auto"  # auto: a GPU when the rank has one; cpu; cuda
    network: NetworkProfile = HOST_PROFILE  # the link the launcher runs the group on
    threads: int = 0  # torch's intra-op threads (0: what the launcher's environment gives)

    def argv(self, results_dir: str, data_dir: str) -> list[str]:
        """The worker's arguments, with this launcher's run directory and data directory."""
        args = [
            "--task",
            self.task,
            "--results",
            results_dir,
            "--run-id",
            self.run_id,
            "--backend",
            self.backend,
            "--timeout",
            f"{self.collective_timeout_s:g}",
            "--seed",
            str(self.seed),
            "--data-dir",
            data_dir,
        ]
        if self.light:
            args.append("--light")
        if self.device != "auto":
            args += ["--device", self.device]
        if self.network.shaped:
            args += ["--network", self.network.name]
        if self.threads:
            args += ["--threads", str(self.threads)]
        if self.training:
            args += [
                "--variant",
                self.variant,
                "--precision",
                self.precision,
                "--compile",
                self.compile,
            ]
        return args

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (Airflow's XCom); the network profile by its name."""
        return {**asdict(self), "network": self.network.name}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WorkerRequest:
        """The request back from :meth:`as_dict`."""
        return cls(**{**values, "network": parse_profile(values.get("network", "host"))})
