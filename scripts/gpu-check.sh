#!/usr/bin/env bash
# Verify every GPU path of scalebench on this machine in under 10 minutes, on light data only:
# matmul peaks, Task 0 over nccl, the engine's timing and throughput, time to accuracy eager and
# compiled, fp16 with loss scaling and bf16. Prints one report and writes it as JSON under
# var/gpu-check/ (see docs/gpu-check.md). Needs the project's Python packages: the set-up's
# .venv when there is one, else the python3 on the PATH (PYTHON=... to choose).
# Exit status: 0 passed, 1 a check failed, 2 no CUDA GPU here.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PYTHON" -m workers.gpu_check "$@"
