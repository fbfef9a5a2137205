"""The dashboard's "When the waste happens" panels (issue 24 §6) on a real Prometheus: gpuwaste_wasted_gpu_hours_total
backfilled with promtool (one sample a minute over a week), waste only on Saturday 02:00–04:00 UTC for team `ml`
(1 GPU-hour per hour) and on Monday 10:00–11:00 UTC for team `vision` (3 GPU-hours in that hour), and each panel's
committed query run at the week's end with the dashboard's variables filled in."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from tests.servers.prometheus import PrometheusFactory

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpuwaste.json"
START = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday
END = START + timedelta(days=7)
#: team → (weekday 0 = Monday, first hour, last hour + 1, GPU-hours per hour)
WASTE = {"ml": (5, 2, 4, 1.0), "vision": (0, 10, 11, 3.0)}


def _openmetrics(path: Path) -> Path:
    lines = ["# TYPE gpuwaste_wasted_gpu_hours counter"]
    for team, (day, lo, hi, per_hour) in WASTE.items():
        total, t = 0.0, START
        while t <= END:
            labels = f'cluster="demo",team="{team}",namespace="{team}-ns",kind="idle_allocation"'
            lines.append(f"gpuwaste_wasted_gpu_hours_total{{{labels}}} {total:.6f} {int(t.timestamp())}")
            if t.weekday() == day and lo <= t.hour < hi:
                total += per_hour / 60
            t += timedelta(minutes=1)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return path


def _panel_query(title: str, team: str) -> str:
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p.get("title") == title]
    (target,) = panel["targets"]
    assert target.get("instant") is True
    expr = target["expr"]
    for name, value in {"$cluster": "demo", "$team": team, "$namespace": ".*", "$__range": "7d",
                        "$__rate_interval": "4m"}.items():
        expr = expr.replace(name, value)
    return expr


def _bars(url: str, expr: str, label: str) -> dict[str, float]:
    body = requests.get(f"{url}/api/v1/query", params={"query": expr, "time": END.timestamp()}, timeout=60).json()
    assert body["status"] == "success", body
    return {r["metric"][label]: float(r["value"][1]) for r in body["data"]["result"]}


@pytest.mark.parametrize(("team", "hours", "days"), [
    ("ml", {"2": 1.0, "3": 1.0}, {"6": 2.0}),  # day_of_week(): 6 = Saturday
    ("vision", {"10": 3.0}, {"1": 3.0}),  # 1 = Monday
    (".*", {"2": 1.0, "3": 1.0, "10": 3.0}, {"6": 2.0, "1": 3.0}),
])
def test_waste_hours_panels_put_the_gpu_hours_in_their_hour_and_weekday(
    tmp_path: Path, prometheus_factory: PrometheusFactory, team: str, hours: dict[str, float], days: dict[str, float]
) -> None:
    server = prometheus_factory(_openmetrics(tmp_path / "waste-hours.om"))
    by_hour = _bars(server.url, _panel_query("Wasted GPU-hours in range by hour of day (UTC)", team), "hour")
    by_day = _bars(server.url, _panel_query("Wasted GPU-hours in range by weekday (UTC)", team), "day")
    # THEN the GPU-hours add up to the counter's increase over the week, in the hours and weekdays they happened
    assert sum(by_hour.values()) == pytest.approx(sum(hours.values()), rel=0.05)
    assert sum(by_day.values()) == pytest.approx(sum(days.values()), rel=0.05)
    for hour, gpu_hours in hours.items():
        assert by_hour[hour] == pytest.approx(gpu_hours, rel=0.1), (hour, by_hour)  # ≤ one 4-min step spills
    for day, gpu_hours in days.items():
        assert by_day[day] == pytest.approx(gpu_hours, abs=0.05), (day, by_day)
    # (one 4-minute step spills at most a few minutes past the last waste hour)
    assert sum(v for h, v in by_hour.items() if h not in hours) < 0.15 * sum(hours.values())
