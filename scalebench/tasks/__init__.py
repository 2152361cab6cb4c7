"""The benchmark task registry: torch-free descriptions of every task.

DAGs, the command-line tool and the dashboard read these specs without
importing torch. The values come from the MLBench benchmark-task text
(Tasks 0 to 4b) and are tested against it.
"""

from scalebench.tasks.registry import TASKS, get_task, task_ids
from scalebench.tasks.specs import (
    AllReduceSpec,
    AWDLSTMConfig,
    GNMTConfig,
    Goal,
    ImageData,
    LanguageModelSpec,
    LossScaleSpec,
    OptimizerSpec,
    ParallelText,
    ScheduleSpec,
    StepDecay,
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
    "GNMTConfig",
    "Goal",
    "ImageData",
    "LanguageModelSpec",
    "LossScaleSpec",
    "OptimizerSpec",
    "ParallelText",
    "ScheduleSpec",
    "StepDecay",
    "TabularData",
    "TaskSpec",
    "TextData",
    "TrainingSpec",
    "TransformerConfig",
    "TranslationSpec",
    "get_task",
    "task_ids",
]
