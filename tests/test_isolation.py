"""The tests keep to their own folders: never the user's ``var/`` (what the quick start made).

Every test gets its own results folder, data folder and results database
(``_own_var`` in conftest.py), and the session fails when anything under the
checkout's ``var/`` was added, changed or removed (``_user_var_untouched``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import REPO, TEST_VAR, USER_VAR, folder_state, state_changes

from scalebench import config


def test_each_test_has_its_own_results_data_and_database(_own_var: Path) -> None:
    assert config.results_path() == _own_var / "results"
    assert config.data_dir() == _own_var / "data"
    assert config.database_url() == f"sqlite:///{_own_var / 'scalebench.db'}"
    for place in (_own_var, config.results_path(), config.data_dir()):
        assert not place.resolve().is_relative_to(REPO), place
        assert not place.resolve().is_relative_to(TEST_VAR), place  # not shared either


def test_the_guard_sees_a_file_added_changed_or_removed(tmp_path: Path) -> None:
    """What the session's check of ``var/`` compares: a new sweep folder, a database that
    was written to, and a file that went are each named."""
    var = tmp_path / "var"
    (var / "results" / "old").mkdir(parents=True)
    (var / "results" / "old" / "sweep.json").write_text("{}")
    database = var / "scalebench.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE sweep (id TEXT)")
    conn.close()
    before = folder_state(var)
    assert state_changes(before, folder_state(var)) == []

    (var / "results" / "new").mkdir()
    (var / "results" / "old" / "sweep.json").unlink()
    with sqlite3.connect(database) as conn:
        conn.execute("INSERT INTO sweep VALUES ('a failed kubernetes sweep')")
    conn.close()
    stat = database.stat()  # a write within the same clock tick still changes the size
    os.utime(database, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))

    assert state_changes(before, folder_state(var)) == [
        "added results/new",
        "changed results",  # a folder's entries changed
        "changed results/old",
        "changed scalebench.db",
        "removed results/old/sweep.json",
    ]


@pytest.mark.slow
def test_a_sweep_run_and_loaded_by_the_command_line_leaves_var_as_it_was(_own_var: Path) -> None:
    """The path the quick start takes (``scalebench run``: workers, manifest, ingest into the
    default database), from the repository's root as every test runs: its results and
    rows go to the test's own folder, and ``var/`` stays as it was."""
    import cli.main as cli

    assert Path.cwd() == REPO  # where ./var/ would be
    before = folder_state(USER_VAR)

    status = cli.main(["run", "task0-allreduce", "--workers", "1", "--light", "--repeats", "1"])

    assert status == 0
    [sweep] = (_own_var / "results").iterdir()
    assert sweep.name.startswith("task0-allreduce")
    assert (_own_var / "scalebench.db").stat().st_size > 0
    assert state_changes(before, folder_state(USER_VAR)) == []
