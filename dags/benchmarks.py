"""Airflow: one DAG per benchmark task (``task0_allreduce``, ``task1a_resnet20_cifar10``, ...).

The DAGs are built from the task registry by ``operators.benchmark_dag``;
this file only lists them. Parsing it imports no torch.
"""

from operators.benchmark_dag import build_benchmark_dag, dag_id
from scalebench.tasks import TASKS

for _spec in TASKS.values():
    globals()[dag_id(_spec)] = build_benchmark_dag(_spec)
