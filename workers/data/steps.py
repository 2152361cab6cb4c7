"""A preparation in steps, each stamped when done, and the lock that keeps two apart.

:class:`Steps` runs a data set's preparation one named step at a time. A step's stamp
(``<folder>/.steps/<name>.json``) records the size and modification time of the files it
read and wrote; while they still match, the step is done and is skipped, so a preparation
that stopped (a full disk, a killed pod) starts again at the first step not done. A step
writes each output whole or not at all (:func:`workers.data.atomic.replaced_when_done`),
and its stamp is written only after it returns: a step that fails leaves the earlier
stamps valid and no output of its own that looks finished.

:func:`preparation_lock` holds a data set's lock file while it is prepared: a second
preparation of the same set (another task, a second pod on the same claim) waits for the
first, saying so, instead of writing the same files at the same time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from workers.data.stamps import file_state, read_stamp, write_stamp

STEPS = ".steps"


class Steps:
    """The steps of one preparation in ``folder``; ``say`` reports each (the task's log)."""

    def __init__(self, folder: Path, say: Callable[[str], None] = print) -> None:
        self.folder = folder
        self.say = say
        self.ran: list[str] = []  # the steps that ran this time (not skipped)

    def _states(self, paths: Sequence[Path]) -> dict[str, dict[str, int] | None]:
        """Each file's size and modification time, keyed by its path from the folder."""
        return {
            os.path.relpath(path, self.folder): file_state(path) if path.is_file() else None
            for path in paths
        }

    def done(self, name: str, inputs: Sequence[Path], outputs: Sequence[Path]) -> bool:
        """Whether step ``name`` ran and nothing it read or wrote changed since."""
        stamp = read_stamp(self.folder / STEPS / f"{name}.json")
        return (
            bool(outputs)
            and stamp.get("inputs") == self._states(inputs)
            and stamp.get("outputs") == self._states(outputs)
        )

    def run(
        self,
        name: str,
        make: Callable[[], None],
        *,
        inputs: Sequence[Path],
        outputs: Sequence[Path],
    ) -> None:
        """Run step ``name`` (``make`` writes ``outputs`` from ``inputs``) unless it is done."""
        if self.done(name, inputs, outputs):
            self.say(f"{name}: done already")
            return
        stamp = self.folder / STEPS / f"{name}.json"
        stamp.unlink(missing_ok=True)
        began = time.monotonic()
        self.say(f"{name}: started")
        make()
        missing = [str(path) for path in outputs if not path.is_file()]
        if missing:
            raise RuntimeError(f"step {name} did not write {', '.join(missing)}")
        seconds = time.monotonic() - began
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_stamp(
            stamp,
            {
                "inputs": self._states(inputs),
                "outputs": self._states(outputs),
                "seconds": round(seconds, 3),
            },
        )
        self.ran.append(name)
        self.say(f"{name}: done in {seconds:.1f} s")


@contextmanager
def preparation_lock(
    data_dir: Path, name: str, say: Callable[[str], None] = print
) -> Iterator[None]:
    """Hold ``<data_dir>/.<name>.lock`` while data set ``name`` is prepared (waits for a
    preparation that holds it, saying so once)."""
    from filelock import FileLock, Timeout

    data_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(data_dir / f".{name}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"{name}: another preparation of it holds {lock.lock_file}; waiting for it to end")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
