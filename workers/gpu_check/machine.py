"""The GPU check's first step, the machine: its facts (GPU, memory, driver, CUDA, NCCL, torch,
the host's CPU) and its matmul peaks measured on the spot, in TFLOP/s.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from workers.gpu_check.report import PASS, Check


def machine_facts() -> dict[str, Any]:
    """GPU model and memory, driver, CUDA and NCCL versions, torch, and the host's CPU."""
    import platform

    import torch

    from scalebench.host import cpu_model

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": f"{torch.version.cuda} (the version torch was built for)",
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "host": platform.node(),
    }
    if not torch.cuda.is_available():
        return facts
    props = torch.cuda.get_device_properties(0)
    facts["gpu"] = f"{props.name} ×{torch.cuda.device_count()}"
    facts["gpu memory"] = f"{props.total_memory / 2**30:.1f} GiB"
    facts["multiprocessors"] = props.multi_processor_count
    facts["compute capability"] = f"{props.major}.{props.minor}"
    facts["driver"] = driver_version()
    try:
        facts["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        facts["nccl"] = None
    return facts


def driver_version() -> str:
    """The NVIDIA driver's version, from ``nvidia-smi`` (``unknown`` without it)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if done.returncode != 0 or not done.stdout.strip():
        return "unknown"
    return done.stdout.strip().splitlines()[0]


def peak_rates(n: int = 8192) -> tuple[Check, dict[str, float]]:
    """Matmul rates on the spot: fp32 (TF32 off), TF32, bf16 and fp16, TFLOP/s."""
    import torch

    device = torch.device("cuda", 0)
    started = time.monotonic()
    rates: dict[str, float] = {}
    details: dict[str, Any] = {}
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in (
            ("fp32", torch.float32, False),
            ("tf32", torch.float32, True),
            ("bf16", torch.bfloat16, False),
            ("fp16", torch.float16, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            rate = matmul_rate_that_fits(dtype, device, n)
            rates[name] = rate.tflops
            details[name] = {
                "tflops": rate.tflops,
                "spread_tflops": rate.spread_tflops,
                "n": rate.n,
            }
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
        torch.cuda.empty_cache()
    figure = ", ".join(f"{name} {tflops:.1f}" for name, tflops in rates.items()) + " TFLOP/s"
    check = Check(
        "peak",
        f"matmul peak ({n}³)",
        PASS,
        figure,
        seconds=time.monotonic() - started,
        details=details,
    )
    return check, rates


def matmul_rate_that_fits(dtype: Any, device: Any, n: int) -> Any:
    """:func:`~workers.gpu_check.measure.matmul_rate` at ``n``, or at half the size again and
    again (down to 1024) while the GPU is too small for three ``n``×``n`` matrices."""
    import torch

    from workers.gpu_check.measure import matmul_rate

    while True:
        try:
            return matmul_rate(dtype, device, n=n)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            if n <= 1024:
                raise
            n //= 2
