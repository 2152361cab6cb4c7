"""The entry points on top of everything: the ``scalebench`` command and the embedded runner.

:mod:`cli.main` is the command (its parser and how a failure ends it); each command is a
module of its own that adds its parser (:mod:`cli.tasks`, :mod:`cli.run`, :mod:`cli.report`,
:mod:`cli.data`, :mod:`cli.database`, :mod:`cli.network`, :mod:`cli.dashboard`), and
:mod:`cli.errors` says how input is refused and a failure reported. :mod:`cli.embedded` runs
one benchmark DAG through Airflow on this machine.
"""
