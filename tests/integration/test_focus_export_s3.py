"""The daily FOCUS export and bill prices in the pipeline, over moto's S3 (issue 24 §4–5).

`ExportFocusFunction` runs through its real entry point on the scheduler's event (`events/scheduled_export.json`), in
the environment template.yaml gives it with the export and the bill switched on (`FocusExportBucket`,
`FocusExportPrefix`, `BillObject`); every AWS call it makes is checked against its policy (`tests.lambda_stack`).
The object is read back from S3 and compared with what `gpuwaste export` writes for the same day and bill; the price
function reads the bill from S3, prices with it, and keeps it for BILL_MAX_AGE_S.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.bootstrap import price as price_root
from gpuwaste.cli import app
from gpuwaste.errors import PermanentError
from gpuwaste.models.messages import FindingMessage, read_stage_body
from gpuwaste.sinks.s3_objects import S3ObjectWriter
from tests.integration.test_lambda_entry_points import SCAN_TIME, config_document, stack_secrets
from tests.lambda_events import load_event
from tests.lambda_stack import REGION, DeployedStack, _reset_composition_roots, deploy
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack
from tests.unit.test_bill_prices import line, write_cur

pytestmark = pytest.mark.integration

EXPORT_BUCKET, PREFIX = "gpuwaste-exports", "finops/focus/"
BILL_BUCKET, BILL_KEY = "gpuwaste-bills", "cur2/2024-01/cur.csv.gz"
KEY = f"{PREFIX}cluster=demo/day=2024-01-01/focus.csv"


def bill_bytes(tmp_path: Path, usd_per_hour: str) -> bytes:
    """A CUR 2.0 month (gzip'd, as AWS Data Exports delivers it) pricing p5.48xlarge at `usd_per_hour` effective."""
    total = str(Decimal(usd_per_hour) * 100)
    cur = write_cur(tmp_path / f"cur-{usd_per_hour}.csv", [
        line("SavingsPlanCoveredUsage", "USE1-BoxUsage:p5.48xlarge", "100", "9832", sp=total, itype="p5.48xlarge")])
    return gzip.compress(cur.read_bytes())


@pytest.fixture
def exporting(aws: Any, slack_api: FakeSlack, jira_api: FakeJira, monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> Iterator[DeployedStack]:
    """The stack with the export and the bill on; the bill in S3 at $40 per p5 instance-hour."""
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (EXPORT_BUCKET, BILL_BUCKET):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=BILL_BUCKET, Key=BILL_KEY, Body=bill_bytes(tmp_path, "40"))
    stack = deploy(monkeypatch, config=config_document(slack_api, jira_api), secrets=stack_secrets(slack_api, jira_api),
                   params={"FocusExportBucket": EXPORT_BUCKET, "FocusExportPrefix": PREFIX,
                           "BillObject": f"{BILL_BUCKET}/{BILL_KEY}"})
    yield stack
    _reset_composition_roots()
    assert stack.denied() == []  # every call allowed by the function's policy in template.yaml


def test_the_daily_export_writes_the_day_of_each_cluster_once_priced_from_the_bill(
        exporting: DeployedStack, tmp_path: Path) -> None:
    # GIVEN the scheduler's tick at 00:30 UTC on 2 January
    tick = load_event("scheduled_export")
    # WHEN the export function runs, and the scheduler retries it
    first = exporting.invoke("ExportFocusFunction", tick)
    s3 = exporting.client("s3")
    body = s3.get_object(Bucket=EXPORT_BUCKET, Key=KEY)["Body"].read()
    again = exporting.invoke("ExportFocusFunction", tick)
    # THEN 1 January of cluster demo is one object under the prefix, the same bytes after the retry
    listed = s3.list_objects_v2(Bucket=EXPORT_BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [KEY]
    assert s3.get_object(Bucket=EXPORT_BUCKET, Key=KEY)["Body"].read() == body
    assert first == again and first["exported"][0]["uri"] == f"s3://{EXPORT_BUCKET}/{KEY}"
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert rows and first["exported"][0]["rows"] == len(rows)
    assert {r["ChargePeriodStart"] for r in rows} == {"2024-01-01T00:00:00Z"}
    # AND the p5 rows are priced from the bill in S3 ($40 / 8 GPUs), naming it
    p5 = [r for r in rows if r["x_PriceSource"].startswith("your bill (CUR 2.0, 2024-01-01 – 2024-01-31)")]
    assert p5 and all(Decimal(r["ListUnitPrice"]) == Decimal(5) for r in p5)
    # AND the rows are the ones `gpuwaste export` writes for that day with that bill
    bill = tmp_path / "bill.csv.gz"
    bill.write_bytes(bill_bytes(tmp_path, "40"))
    cli = CliRunner().invoke(app, ["export", "-r", str(local.demo_recording()), "--cluster", "demo", "--at",
                                   "2024-01-02T00:00:00Z", "--window", "24h", "--bill", str(bill), "--out",
                                   str(tmp_path / "cli.csv")])
    assert cli.exit_code == 0, cli.output
    ours = {(r["ResourceId"], r["x_Node"], r["x_LineKind"]): r["BilledCost"] for r in rows}
    theirs = {(r["ResourceId"], r["x_Node"], r["x_LineKind"]): r["BilledCost"]
              for r in csv.DictReader(io.StringIO((tmp_path / "cli.csv").read_text()))}
    assert ours == theirs


def test_an_event_day_re_exports_that_day(exporting: DeployedStack) -> None:
    # GIVEN a hand-run backfill a few days later, naming the day
    event = {**load_event("scheduled_export"), "time": "2024-01-05T09:00:00Z", "day": "2024-01-01"}
    # WHEN run, THEN it writes that day's key (the one the schedule wrote), not the day before the tick
    done = exporting.invoke("ExportFocusFunction", event)
    assert done["exported"][0]["uri"] == f"s3://{EXPORT_BUCKET}/{KEY}"


def test_an_object_over_the_put_limit_is_refused_before_s3(exporting: DeployedStack) -> None:
    s3 = exporting.client("s3")
    writer = S3ObjectWriter(client=s3, bucket=EXPORT_BUCKET, prefix="x/", max_put_bytes=10)
    with pytest.raises(PermanentError, match="over S3's single-put limit"):
        writer.put("big.csv", b"0123456789A", content_type="text/csv")
    assert "Contents" not in s3.list_objects_v2(Bucket=EXPORT_BUCKET, Prefix="x/")


def _priced_sources(stack: DeployedStack) -> list[str]:
    """The cost basis of every priced finding on the priced queue (drained)."""
    out = []
    for m in stack.drain("PricedQueue"):
        for item in read_stage_body(m["Body"]):
            if not isinstance(item, FindingMessage) or item.finding.cost is None:
                continue
            cost = item.finding.cost
            if cost.usd_per_gpu_hour and item.finding.subject.instance_type == "p5.48xlarge":
                out.append(f"{cost.usd_per_gpu_hour} {cost.model_dump_json()}")
    return out


def test_the_price_function_prices_from_the_bill_in_s3_and_keeps_it_for_its_max_age(
        exporting: DeployedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a scan's findings on the findings queue
    exporting.invoke("DispatchScansFunction", {**load_event("scheduled_scan"), "time": SCAN_TIME})
    exporting.pump("ScanRequestsQueue")
    findings = exporting.drain("FindingsQueue")
    # WHEN the price function prices them
    exporting.send("FindingsQueue", *[m["Body"] for m in findings])
    exporting.pump("FindingsQueue")
    # THEN the p5 findings cost $5 per GPU-hour, from the bill, with its provenance
    priced = _priced_sources(exporting)
    assert priced and all(p.startswith("5") and "your bill (CUR 2.0, 2024-01-01" in p for p in priced)
    # AND a new bill in S3 is not read again within BILL_MAX_AGE_S (one GetObject), but after it
    exporting.client("s3").put_object(Bucket=BILL_BUCKET, Key=BILL_KEY, Body=bill_bytes(tmp_path, "80"))
    exporting.send("FindingsQueue", *[m["Body"] for m in findings])
    exporting.pump("FindingsQueue")
    assert all(p.startswith("5") for p in _priced_sources(exporting))
    reads = [c for c in exporting.recorder.of("PriceFindingsFunction") if c.operation == "GetObject"]
    assert len(reads) == 1
    now = price_root.time.time()
    monkeypatch.setattr(price_root.time, "time", lambda: now + 3600)
    exporting.send("FindingsQueue", *[m["Body"] for m in findings])
    exporting.pump("FindingsQueue")
    assert (p := _priced_sources(exporting)) and all(x.startswith("10") for x in p)
