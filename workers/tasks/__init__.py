"""The benchmark task registry: torch-free descriptions of every task.

DAGs, the command-line tool and the dashboard read these specs without
importing torch. The values come from the MLBench benchmark-task text
(Task 0 and Task 1a so far) and are tested against it.
"""

from workers.tasks.registry import TASKS, get_task, task_ids
from workers.tasks.specs import (
    AllReduceSpec,
    AWDLSTMConfig,
    Goal,
    ImageData,
    LanguageModelSpec,
    LossScaleSpec,
    OptimizerSpec,
    ParallelText,
    ScheduleSpec,
    TabularData,
    TaskSpec,
    TextData,
    TrainingSpec,
    TransformerConfig,
    TranslationSpec,
)

__all__ = [
    "TASKS",
    "AWDLSTMConfig",
    "AllReduceSpec",
    "Goal",
    "ImageData",
    "LanguageModelSpec",
    "LossScaleSpec",
    "OptimizerSpec",
    "ParallelText",
    "ScheduleSpec",
    "TabularData",
    "TaskSpec",
    "TextData",
    "TrainingSpec",
    "TransformerConfig",
    "TranslationSpec",
    "get_task",
    "task_ids",
]
