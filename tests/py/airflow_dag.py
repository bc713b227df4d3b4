#!/usr/bin/env python3
"""Loads examples/schedule/airflow_dag.py with Airflow (a DagBag, as the scheduler does) and
checks that a run's date ({{ ds }}) is the day before it starts, then runs its task's code against a stand-in `lakeswap` that exits with each code in turn: 0 returns
the summary, 2 and 3 fail the task without retries (AirflowFailException), 1, 4, 129, 130 and 143 ask
for a retry (AirflowException). Prints `ok` when every check holds.

usage: airflow_dag.py DAG_FOLDER
"""
import os
import stat
import sys
import tempfile

home = tempfile.mkdtemp()
os.environ.setdefault("AIRFLOW_HOME", home)
from airflow.timetables.base import TimeRestriction

try:  # Airflow 3
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 2
    from airflow.models.dagbag import DagBag
    from airflow.exceptions import AirflowException, AirflowFailException


def main():
    bag = DagBag(dag_folder=sys.argv[1])
    assert not bag.import_errors, bag.import_errors
    assert list(bag.dags) == ["revenue_daily"], list(bag.dags)
    dag = bag.dags["revenue_daily"]
    (task,) = dag.tasks
    assert task.retries == 3, task.retries
    # {{ ds }} is the day before the run: the date whose input is complete (a cron string in
    # Airflow 3 is a trigger, whose ds is the day the run starts).
    timetable = dag.timetable
    if not hasattr(timetable, "next_dagrun_info"):  # Airflow 3: the scheduler's own object
        from airflow.serialization.encoders import coerce_to_core_timetable

        timetable = coerce_to_core_timetable(timetable)
    first = timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=dag.start_date, latest=None, catchup=True),
    )
    assert str(first.logical_date.date()) == "2026-01-01", first
    assert (first.run_after.date() - first.logical_date.date()).days == 1, first
    # A stand-in lakeswap: writes a summary where --summary-json says, exits with $CODE.
    bin_dir = os.path.join(home, "bin")
    os.makedirs(bin_dir)
    fake = os.path.join(bin_dir, "lakeswap")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --summary-json ] && echo "{\\"exit_code\\": $CODE}" > "$2"; shift; done\n'
                'exit "$CODE"\n')
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    for code, want in [(0, None), (1, "retry"), (2, "fail"), (3, "fail"), (4, "retry"), (129, "retry"), (130, "retry"), (143, "retry")]:
        os.environ["CODE"] = str(code)
        try:
            got = task.python_callable(ds="2026-11-01")
            outcome = None
            assert got == {"exit_code": 0}, got
        except AirflowFailException:
            outcome = "fail"
        except AirflowException:
            outcome = "retry"
        assert outcome == want, f"exit {code}: the task would {outcome or 'succeed'}, the docstring says {want}"
    print("ok")


if __name__ == "__main__":
    main()
