"""Airflow: one lakeswap task per logical date ({{ ds }}), run the next day once it is over.

Re-running or clearing a task replaces that date's partition atomically; it never appends, so
retries and backfills (`airflow dags backfill -s 2026-01-01 -e 2026-03-31 revenue_daily`) are safe.

Retries follow lakeswap's exit codes: 2 (usage or config error) and 3 (data contract violation:
conflicting versions, bad rows) need a person, so the task fails at once without retrying; 1
(some partitions failed, e.g. a store outage), 4 (leased by another live run) and 129 / 130 / 143
(stopped by a signal) are retried. lakeswap writes the summary JSON on every exit; a successful
task returns it (to XCom), a failed one leaves it in /tmp/lakeswap-<date>.json and the log.
"""
import json
import os
import subprocess

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG, CronDataIntervalTimetable, task
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.decorators import task
    from airflow.exceptions import AirflowException, AirflowFailException
    from airflow.timetables.interval import CronDataIntervalTimetable

CONFIG = os.environ.get("LAKESWAP_CONFIG", "/opt/lake/revenue.toml")
NOT_RETRIED = {2: "usage or config error", 3: "data contract violation"}


@task(retries=3, retry_delay=pendulum.duration(minutes=5))
def lakeswap_run(ds=None):
    summary = f"/tmp/lakeswap-{ds}.json"
    cmd = ["lakeswap", "run", "--config", CONFIG, "--date", ds, "--log-format", "json", "--summary-json", summary]
    code = subprocess.run(cmd, check=False).returncode
    if code == 0:
        with open(summary) as f:
            return json.load(f)
    if code in NOT_RETRIED:
        raise AirflowFailException(f"lakeswap exited {code} ({NOT_RETRIED[code]}): not retried, see the log")
    raise AirflowException(f"lakeswap exited {code}: retrying")


with DAG(
    dag_id="revenue_daily",
    # The day's data interval, run once it has ended: {{ ds }} is the day before the run (at
    # 02:30 on the 2nd, `--date` the 1st). A plain cron string would not say so: Airflow 3 reads
    # it as a trigger (`create_cron_data_intervals = False`), whose {{ ds }} is the day the run
    # starts, a day whose input is still arriving.
    schedule=CronDataIntervalTimetable("30 2 * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=True,
    max_active_runs=4,
) as dag:
    lakeswap_run()
