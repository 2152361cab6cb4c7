"""Fixed-seed loss curves of every training task's light variant, one rank on the CPU.

A curve is what ``python -m workers.run`` records for the first epochs of a
light run with seed 0 and one torch thread: every step's loss and learning
rate, and every evaluation's metrics, with the CPU's vector instruction set
as torch reports it and the processor model (floating-point sums differ
between AVX2 and AVX-512 kernels, and between processors that pick different
kernels). ``tests/data/loss_curves/<task>.json`` holds the curves the
training engine must reproduce exactly on that processor;
``python tests/loss_curves.py --write`` records them again (only when a
change of the task's math is intended).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CURVES = Path(__file__).resolve().parent / "data" / "loss_curves"
# Epochs recorded per task: enough steps to cover warm-up, an evaluation and
# (for Task 3a) variable sequence lengths, while the whole check stays short.
EPOCHS = {
    "task1a-resnet20-cifar10": 1,
    "task2a-logreg-epsilon": 1,
    "task3a-awdlstm-wikitext2": 1,
    "task4a-gnmt-wmt16": 1,
    "task4b-transformer-wmt17": 1,
}


def run_one_epoch(
    task_id: str,
    run_dir: Path,
    extra_args: tuple[str, ...] = (),
    settings: dict[str, str] | None = None,
) -> None:
    """Run one rank of ``task_id``'s light variant for its recorded epochs, seed 0, one
    thread; ``settings``: environment variables the run gets besides (MLPerf's: none but
    those given)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK") and not k.startswith("SCALEBENCH_MLPERF_")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", **(settings or {}))
    command = [
        sys.executable,
        "-m",
        "workers.run",
        "--task",
        task_id,
        "--light",
        "--results",
        str(run_dir),
        "--seed",
        "0",
        "--device",
        "cpu",
        "--max-epochs",
        str(EPOCHS[task_id]),
        *extra_args,
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{task_id} exited with {done.returncode}:\n{done.stdout}{done.stderr}")


def read_curve(task_id: str, run_dir: Path) -> dict[str, Any]:
    """The curve of a run :func:`run_one_epoch` made: every step's loss and learning rate,
    every evaluation's metrics, and the processor it ran on."""
    steps, evals = [], []
    for line in (run_dir / "rank-0.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "step":
            steps.append([record["epoch"], record["step"], record["loss"], record["lr"]])
        elif record["kind"] == "eval":
            evals.append([record["epoch"], record["metrics"]])
    return {
        "task": task_id,
        "epochs": EPOCHS[task_id],
        "cpu": cpu_capability(),
        "steps": steps,
        "evals": evals,
    }


def record_curve(task_id: str, run_dir: Path, extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run one rank of ``task_id``'s light variant and return its curve."""
    run_one_epoch(task_id, run_dir, extra_args)
    return read_curve(task_id, run_dir)


def cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels use here and the processor model.

    E.g. ``AVX512 AMD EPYC (family 25, model 17)``. The instruction set alone is
    not enough: oneDNN and the BLAS pick kernels per processor, so two AVX-512
    machines of different makers sum in different orders.
    """
    import torch

    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name", "unknown processor")
    if "model" in fields:
        model += f" (family {fields.get('cpu family', '?')}, model {fields['model']})"
    return f"{torch.backends.cpu.get_cpu_capability()} {model}"


# (task, extra worker arguments) of every recorded curve; the file is named by both.
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    **{task_id: (task_id, ()) for task_id in EPOCHS},
}


def expected_curve(case: str) -> dict[str, Any]:
    return json.loads((CURVES / f"{case}.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the reference curves")
    parser.add_argument("cases", nargs="*", default=sorted(CASES))
    args = parser.parse_args()
    import tempfile

    for case in args.cases:
        task_id, extra_args = CASES[case]
        with tempfile.TemporaryDirectory() as tmp:
            curve = record_curve(task_id, Path(tmp) / "run", extra_args)
        print(f"{case}: {len(curve['steps'])} steps, {len(curve['evals'])} evaluations")
        if args.write:
            CURVES.mkdir(parents=True, exist_ok=True)
            (CURVES / f"{case}.json").write_text(json.dumps(curve) + "\n")
        elif curve != expected_curve(case):
            print(f"  differs from {CURVES / (case + '.json')}")


if __name__ == "__main__":
    main()
