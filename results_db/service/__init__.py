"""What the command line, the operators and the dashboard ask of the results database.

Migrate it, load sweeps into it (:func:`ingest`, the one entry every caller uses, and
:func:`load_plan` for a sweep just planned, :func:`group_started` for a group that starts,
:func:`load_quietly` for a group still running), export a sweep, keep the price table, check a
nightly for regressions, say how a sweep ended and print its report, project a training sweep
to other worker counts, and say in one line what is wrong with a database that cannot be used
(:func:`database_problem`). The SQL lives in the modules beside this package (``queries``
reads, ``maintenance`` writes prices and roles, ``ingest`` loads, ``regressions`` detects);
these modules check the input, word the errors and print the results, one subject each:

- :mod:`results_db.service.engines`: engines and URLs, the schema's upgrade, read-only roles,
  a database that cannot be used;
- :mod:`results_db.service.loading`: ingest;
- :mod:`results_db.service.export`: a sweep's files and official results;
- :mod:`results_db.service.prices`: the price table;
- :mod:`results_db.service.sweeps`: regressions, a sweep's outcome and summary;
- :mod:`results_db.service.projection`: the scaling projection and the fits it rests on;
- :mod:`results_db.service.stacks`: a sweep's stacks compared, round by round.

Every public name is importable from this package.
"""

from __future__ import annotations

from results_db.service.engines import (
    ROLE_NAME,
    SCHEMA_MISSING,
    SUPPORTED_DATABASES,
    CommandError,
    database_problem,
    engine_for,
    grant_readonly,
    reader_for,
    redact,
    upgrade,
)
from results_db.service.export import export, inside, official_result, scaling_frame
from results_db.service.loading import (
    check_location,
    close_vanished_sweeps,
    group_started,
    ingest,
    load_plan,
    load_quietly,
    printed,
)
from results_db.service.prices import (
    MAX_PRICE_NAME,
    MAX_PRICE_PER_HOUR,
    PRICE_COLUMNS,
    PRICE_PLACES,
    PRICE_STEP,
    load_price_file,
    price_values,
    set_prices,
)
from results_db.service.projection import project, refit
from results_db.service.stacks import (
    StackReport,
    compare_sweep,
    comparison_json,
    comparison_table,
)
from results_db.service.sweeps import (
    MAX_WINDOW,
    NoResult,
    check_regressions,
    describe_finding,
    regression_rule,
    regressions,
    summarize_sweep,
    sweep_outcome,
)

__all__ = [
    "MAX_PRICE_NAME",
    "MAX_PRICE_PER_HOUR",
    "MAX_WINDOW",
    "PRICE_COLUMNS",
    "PRICE_PLACES",
    "PRICE_STEP",
    "ROLE_NAME",
    "SCHEMA_MISSING",
    "SUPPORTED_DATABASES",
    "CommandError",
    "NoResult",
    "StackReport",
    "check_location",
    "check_regressions",
    "close_vanished_sweeps",
    "compare_sweep",
    "comparison_json",
    "comparison_table",
    "database_problem",
    "describe_finding",
    "engine_for",
    "export",
    "grant_readonly",
    "group_started",
    "ingest",
    "inside",
    "load_plan",
    "load_price_file",
    "load_quietly",
    "official_result",
    "price_values",
    "printed",
    "project",
    "reader_for",
    "redact",
    "refit",
    "regression_rule",
    "regressions",
    "scaling_frame",
    "set_prices",
    "summarize_sweep",
    "sweep_outcome",
    "upgrade",
]
