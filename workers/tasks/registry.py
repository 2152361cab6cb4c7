"""Every benchmark task scalebench knows, by id.

Hyperparameters are written here once and tested against the benchmark-task
text (``tests/test_task_specs.py``). Where the text is silent, the choice is
stated in the spec's ``notes``.
"""

from __future__ import annotations

from workers.tasks.specs import (
    WORLD_SIZES,
    AllReduceSpec,
    Goal,
    ImageData,
    OptimizerSpec,
    ScheduleSpec,
    TaskSpec,
    TrainingSpec,
)

CIFAR10 = ImageData(
    name="cifar10",
    image_size=32,
    channels=3,
    classes=10,
    crop_padding=4,
    horizontal_flip=True,
)

# scikit-learn's handwritten digits (1,797 greyscale 8×8 images, shipped with
# the package, so the light variant needs no download). Mirroring a digit
# changes its meaning, so the light set crops but does not flip.
DIGITS = ImageData(
    name="digits",
    image_size=8,
    channels=1,
    classes=10,
    crop_padding=1,
    horizontal_flip=False,
)

TASK0_ALLREDUCE = AllReduceSpec(
    id="task0-allreduce",
    title="Task 0: all-reduce latency and bandwidth",
    world_sizes=WORLD_SIZES,
    log10_min=0.0,
    log10_max=8.0,
    points=80,
    repetitions=100,
    warmup=5,
    light_log10_max=6.0,
    light_points=13,
    light_repetitions=10,
    notes=(
        "Sizes are element counts of np.logspace(0, 8, num=80), rounded; rounding "
        "repeats the smallest sizes, which are measured once. Every timed "
        "repetition starts after a barrier and is preceded by untimed warm-up "
        "repetitions of the same size. A repetition's time is the slowest rank's."
    ),
)

TASK1A_RESNET20_CIFAR10 = TrainingSpec(
    id="task1a-resnet20-cifar10",
    title="Task 1a: ResNet-20 on CIFAR-10",
    model="resnet20",
    data=CIFAR10,
    light_data=DIGITS,
    world_sizes=WORLD_SIZES,
    batch_per_worker=128,
    optimizer=OptimizerSpec(
        name="sgd",
        lr=0.02,
        momentum=0.9,
        nesterov=True,
        weight_decay=1e-4,
        dampening=0.0,
    ),
    schedule=ScheduleSpec(warmup="linear-log2k", plateau_patience=2, plateau_factor=0.1),
    goal=Goal(metric="top1_accuracy", direction="max", threshold=80.0, light_threshold=70.0),
    max_epochs=164,
    light_max_epochs=30,
    notes=(
        "ResNet-20 of He et al. (2015) with 1×1-convolution projection shortcuts "
        "where the shape changes (272,474 parameters), as in the reference "
        "implementation. The text does not give the plateau decay factor: 0.1 "
        "is used, applied after warm-up once the validation loss has not improved "
        "for 2 consecutive epochs. The warm-up rises per step, linearly, from "
        "0.02 to 0.02×k over the first log2(k) epochs. Batch-norm running "
        "statistics are averaged across ranks before each evaluation. The light "
        "variant trains the same network (one input channel) on scikit-learn's "
        "8×8 digits with a 1-pixel crop and no flip; light target 70 % top-1."
    ),
)

TASKS: dict[str, TaskSpec] = {spec.id: spec for spec in (TASK0_ALLREDUCE, TASK1A_RESNET20_CIFAR10)}


def task_ids() -> list[str]:
    return sorted(TASKS)


def get_task(task_id: str) -> TaskSpec:
    """The spec for ``task_id``; a ``KeyError`` naming the known ids otherwise."""
    try:
        return TASKS[task_id]
    except KeyError:
        known = ", ".join(task_ids())
        raise KeyError(f"unknown task {task_id!r}; known tasks: {known}") from None
