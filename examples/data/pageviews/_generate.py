"""Writes the page-view example of config/pageviews.toml (deterministic): two days of page views
with exact duplicates and re-sent versions, and the daily exchange rates of examples/data/fx.

    python3 examples/data/pageviews/_generate.py
"""
import os
import random
from datetime import date, datetime, timedelta, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(7)
countries = [("US", "USD"), ("DE", "EUR"), ("FR", "EUR"), ("GB", "GBP"), ("JP", "JPY")]
urls = ["/", "/pricing", "/docs", "/blog/lakes", "/signup"]

for day in [date(2026, 11, 1), date(2026, 11, 2)]:
    rows = []
    for i in range(400):
        view_id = f"pv-{day:%m%d}-{i:05d}"
        country, currency = rng.choice(countries)
        ts = datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(seconds=rng.randrange(86400))
        for version in range(1, rng.choice([1, 1, 1, 2, 3]) + 1):
            duration = rng.choice([rng.randrange(200, 1000), rng.randrange(1000, 60000), rng.randrange(60000, 600000)])
            revenue = f"{rng.randrange(0, 500) / 100:.2f}" if currency != "JPY" else f"{rng.randrange(0, 500)}.00"
            row = [view_id, str(version), ts.strftime("%Y-%m-%dT%H:%M:%SZ"), country, rng.choice(urls),
                   str(duration), revenue, currency]
            rows.append(row)
            if rng.random() < 0.05:
                rows.append(list(row))  # an exact duplicate
    rng.shuffle(rows)
    folder = os.path.join(HERE, f"event_date={day}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "views.csv"), "w") as f:
        f.write("view_id,version,ts,country,url,duration_ms,ad_revenue,currency\n")
        for r in rows:
            f.write(",".join(r) + "\n")

rates = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0066}
with open(os.path.join(HERE, "..", "fx", "rates.csv"), "w") as f:
    f.write("currency,date,usd_rate\n")
    for day in [date(2026, 11, 1), date(2026, 11, 2)]:
        for cur, r in rates.items():
            drift = 1 + (day.day - 1) * 0.001
            f.write(f"{cur},{day},{r * drift:.6f}\n")
