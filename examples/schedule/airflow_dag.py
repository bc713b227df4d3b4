"""Airflow: one lakeswap task per logical date ({{ ds }}).

Re-running or clearing a task replaces that date's partition atomically; it never appends, so
retries and backfills (`airflow dags backfill -s 2026-01-01 -e 2026-03-31 revenue_daily`) are safe.
Exit code 4 (partition leased by another live run) is retried; 2 (config) and 3 (bad data) are not.
"""
import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG(
    dag_id="revenue_daily",
    schedule="30 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=True,
    max_active_runs=4,
    default_args={"retries": 3, "retry_delay": pendulum.duration(minutes=5)},
) as dag:
    BashOperator(
        task_id="lakeswap_run",
        bash_command=(
            "lakeswap run --config /opt/lake/revenue.toml --date {{ ds }} "
            "--log-format json --summary-json /tmp/lakeswap-{{ ds }}.json"
        ),
        # Exit code 3 (data contract violation) needs a person, not a retry.
        skip_on_exit_code=None,
    )
