"""The read functions of `serve`'s /api/v1 and `gpuwaste mcp` (commands/api/) over the demo's state file: filters
and pages checked against the store's own records, the explain document against `gpuwaste explain`, the summary
against `gpuwaste summary -o json`, the OpenAPI document against its committed copy, and the rate limiter's bucket."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.commands.api import FindingsReader, RateLimiter, ReadError, openapi_document, parse_since
from gpuwaste.config import GpuWasteConfig
from gpuwaste.store.sqlite import SqliteFindingStore

ROOT = Path(__file__).resolve().parents[2]
ALL = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC))


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("demo") / "state.db"
    ran = CliRunner().invoke(app, ["demo", "-q", "--state", str(state)], env={"COLUMNS": "200"})
    assert ran.exit_code == 0, ran.output
    return state


def _records(state: Path):  # type: ignore[no-untyped-def]
    store = SqliteFindingStore(state)
    try:
        return store.history(since=ALL[0], until=ALL[1])
    finally:
        store.close()


def test_filters_select_exactly_the_matching_records(demo_state: Path) -> None:
    # GIVEN the demo's state file and its records read straight from the store
    records = _records(demo_state)
    reader = FindingsReader(demo_state, GpuWasteConfig())
    namespace = next(r.namespace for r in records if r.namespace)
    # WHEN the findings are listed per filter
    everything = reader.list_findings(limit=500)
    opened = reader.list_findings(state="open", limit=500)
    in_ns = reader.list_findings(namespace=namespace, limit=500)
    idle = reader.list_findings(kind="idle_allocation", limit=500)
    # THEN each page holds exactly the records that match, by fingerprint
    assert {f.fingerprint for f in everything.items} == {r.fingerprint for r in records}
    assert {f.fingerprint for f in opened.items} == {r.fingerprint for r in records if r.state.value == "open"}
    assert {f.fingerprint for f in in_ns.items} == {r.fingerprint for r in records if r.namespace == namespace}
    assert {f.fingerprint for f in idle.items} == {r.fingerprint for r in records if r.kind == "idle_allocation"}
    assert 0 < opened.total < everything.total and idle.total > 0


def test_team_and_since_filters(demo_state: Path) -> None:
    # GIVEN the listed findings with their teams and the newest activity in the store
    reader = FindingsReader(demo_state, GpuWasteConfig())
    everything = reader.list_findings(limit=500).items
    team = next(f.team for f in everything if f.team != "unassigned")
    newest = max(max(f.last_seen, f.resolved_at or f.last_seen) for f in everything)
    # WHEN filtered by team and by a time at the newest activity
    by_team = reader.list_findings(team=team, limit=500)
    recent = reader.list_findings(since=newest.isoformat(), limit=500)
    # THEN the team filter keeps that team only, and `since` only what was active at or after it
    assert by_team.total == sum(1 for f in everything if f.team == team) and by_team.total > 0
    assert recent.total == sum(1 for f in everything if max(f.last_seen, f.resolved_at or f.last_seen) >= newest)
    assert 0 < recent.total < len(everything)


def test_pages_cover_every_finding_once_in_order(demo_state: Path) -> None:
    # GIVEN the demo's findings listed in pages of 7
    reader = FindingsReader(demo_state, GpuWasteConfig())
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = reader.list_findings(limit=7, offset=offset)
        assert len(page.items) <= 7
        seen.extend(f.fingerprint for f in page.items)
        offset = page.next_offset
    # THEN the pages hold every finding once, in the one-page order
    assert seen == [f.fingerprint for f in reader.list_findings(limit=500).items]
    assert len(seen) == len(_records(demo_state))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit=0"),
        ({"limit": 501}, "limit=501"),
        ({"offset": -1}, "offset=-1"),
        ({"kind": "bogus"}, "kind='bogus'"),
        ({"state": "closed"}, "state='closed'"),
        ({"since": "yesterday"}, "since="),
        ({"since": "2024-01-01T00:00:00"}, "time zone"),
    ],
)
def test_bad_filters_are_clear_errors(demo_state: Path, kwargs: dict[str, object], message: str) -> None:
    reader = FindingsReader(demo_state, GpuWasteConfig())
    with pytest.raises(ReadError, match=message) as caught:
        reader.list_findings(**kwargs)  # type: ignore[arg-type]
    assert caught.value.status == 400


def test_explain_document_is_the_explain_command_and_the_stored_finding(demo_state: Path) -> None:
    # GIVEN one open finding of the demo
    reader = FindingsReader(demo_state, GpuWasteConfig())
    first = reader.list_findings(state="open", limit=1).items[0]
    # WHEN it is explained by a short ID, and by `gpuwaste explain --state`
    doc = reader.explain(first.fingerprint[:8].upper())
    cli = CliRunner().invoke(
        app, ["explain", first.fingerprint[:8], "--state", str(demo_state)], env={"COLUMNS": "400"}
    )
    # THEN the document carries the command's text, the stored finding and the detector's thresholds
    assert cli.exit_code == 0, cli.output
    assert doc.text.strip() == cli.output.strip()
    assert doc.finding is not None and doc.finding.fingerprint == first.fingerprint
    assert doc.record == first and doc.thresholds


def test_explain_unknown_and_malformed_ids(demo_state: Path) -> None:
    reader = FindingsReader(demo_state, GpuWasteConfig())
    with pytest.raises(ReadError) as unknown:
        reader.explain("ffffffffffffffff")
    assert unknown.value.status == 404
    with pytest.raises(ReadError, match="hex") as bad:
        reader.explain("../etc")
    assert bad.value.status == 400


def test_summary_is_the_summary_command(demo_state: Path) -> None:
    # GIVEN the demo's state file
    reader = FindingsReader(demo_state, GpuWasteConfig())
    # WHEN the 7-day summary is read, and printed by `gpuwaste summary -o json --since 7d`
    summary = reader.summary("7d")
    cli = CliRunner().invoke(app, ["summary", "--state", str(demo_state), "--since", "7d", "-o", "json"])
    doc = json.loads(cli.stdout)
    # THEN both give the same period, counts and money (the command rounds to the cent)
    assert cli.exit_code == 0, cli.output
    assert (summary.open_findings, summary.opened, summary.resolved) == (
        doc["open_findings"],
        doc["opened"],
        doc["resolved"],
    )
    assert f"{summary.wasted_usd:.2f}" == doc["wasted_usd"] and summary.wasted_usd > 0
    assert [o.fingerprint for o in summary.top] == [o["fingerprint"] for o in doc["top"]]
    top = reader.top_offenders("7d", 3)
    assert [o.fingerprint for o in top.items] == [o.fingerprint for o in summary.top[:3]]
    with pytest.raises(ReadError, match="period"):
        reader.summary("91d")


def test_an_absent_state_file_reads_as_empty(tmp_path: Path) -> None:
    reader = FindingsReader(tmp_path / "none.db", GpuWasteConfig())
    assert reader.list_findings().total == 0
    assert reader.summary().open_findings == 0
    assert not (tmp_path / "none.db").exists()  # reading never creates the store


def test_since_accepts_durations_times_and_unix_seconds() -> None:
    now = datetime(2024, 1, 2, tzinfo=UTC)
    assert parse_since("1d", now=now) == now - timedelta(days=1)
    assert parse_since("2024-01-01T00:00:00Z", now=now) == datetime(2024, 1, 1, tzinfo=UTC)
    assert parse_since("0", now=now) == datetime(1970, 1, 1, tzinfo=UTC)


def test_rate_limiter_allows_the_burst_then_the_rate() -> None:
    # GIVEN a bucket of 3 at 2 per second on a clock the test moves
    t = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: t[0])
    # WHEN one address asks 4 times at once, another once, then the first again half a second later
    first = [limiter.take("a") for _ in range(4)]
    other = limiter.take("b")
    t[0] = 0.5
    later = limiter.take("a")
    # THEN the burst passes, the 4th waits 0.5 s, other addresses are not affected, and the bucket refills
    assert first[:3] == [0.0, 0.0, 0.0] and first[3] == pytest.approx(0.5)
    assert other == 0.0 and later == 0.0


def test_openapi_document_matches_the_committed_file() -> None:
    # GIVEN docs/openapi.json in the repository
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    # WHEN the document is generated from the models
    generated = openapi_document()
    # THEN they agree (regenerate: python -c "from gpuwaste.commands.api import write_openapi; write_openapi()")
    assert generated == committed
    schemas = generated["components"]["schemas"]
    assert {"FindingsPage", "ExplainDocument", "DailySummary", "Finding", "FindingView"} <= set(schemas)
    for path, item in generated["paths"].items():
        assert set(item) == {"get"}, path  # read-only


def test_openapi_document_is_valid_openapi_3_1() -> None:
    # openapi-spec-validator comes with moto[server] (requirements-dev.txt)
    validator = pytest.importorskip(
        "openapi_spec_validator", reason="openapi-spec-validator not installed (moto[server])"
    )
    validator.validate(openapi_document())


def test_mcp_command_without_the_sdk_names_the_extra(demo_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the SDK cannot be imported (None in sys.modules makes `import mcp` fail as when it is absent)
    import sys

    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    # WHEN `gpuwaste mcp` starts
    ran = CliRunner().invoke(app, ["mcp", "--state", str(demo_state)])
    # THEN it exits 2 naming the extra, and how to install it from a clone (gpuwaste is not installed from PyPI)
    assert ran.exit_code == 2 and "gpuwaste[mcp]" in ran.output
    assert "pip install '.[mcp]'" in ran.output.replace("\n", " ")


def test_serve_mcp_port_needs_the_token_and_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("GPUWASTE_API_TOKEN", raising=False)
    no_token = CliRunner().invoke(app, ["serve", "--mcp-port", "0", "--max-scans", "1"])
    assert no_token.exit_code == 2 and "GPUWASTE_API_TOKEN" in no_token.output
    monkeypatch.setitem(sys.modules, "mcp", None)
    no_sdk = CliRunner().invoke(app, ["serve", "--mcp-port", "0", "--max-scans", "1"], env={"GPUWASTE_API_TOKEN": "t"})
    assert no_sdk.exit_code == 2 and "gpuwaste[mcp]" in no_sdk.output


def test_reads_close_the_state_file(demo_state: Path) -> None:
    # GIVEN the reader WHEN each read function is called many times (as the API does per request)
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("no /proc/self/fd on this system")
    reader = FindingsReader(demo_state, GpuWasteConfig())
    fingerprint = reader.list_findings(limit=1).items[0].fingerprint
    before = len(list(fds.iterdir()))
    for _ in range(30):
        reader.list_findings(limit=5)
        reader.explain(fingerprint[:8])
        reader.summary("1d")
        reader.top_offenders("1d", 3)
    # THEN no SQLite file stays open (a leak would add 30+ descriptors)
    assert len(list(fds.iterdir())) - before < 5


def test_a_write_to_the_store_is_seen_by_the_next_read(tmp_path: Path, demo_state: Path) -> None:
    # GIVEN a copy of the demo's state file read once (records and a summary kept)
    import shutil

    state = tmp_path / "state.db"
    shutil.copy(demo_state, state)
    reader = FindingsReader(state, GpuWasteConfig())
    first = reader.list_findings(limit=500)
    summary = reader.summary("7d")
    assert reader.list_findings(limit=500) == first and reader.summary("7d") is summary  # kept, not read again
    # WHEN the scan side writes one more record (another connection, as serve's scan does)
    store = SqliteFindingStore(state)
    try:
        record = store.get(first.items[0].fingerprint)
        assert record is not None
        assert store.put_new(record.model_copy(update={"fingerprint": "f" * 64, "namespace": "new-ns", "version": 0}))
    finally:
        store.close()
    # THEN the next reads see it
    again = reader.list_findings(limit=500)
    assert again.total == first.total + 1 and reader.list_findings(namespace="new-ns").total == 1
    assert reader.summary("7d") is not summary


def test_kind_takes_the_names_scan_kind_takes(demo_state: Path) -> None:
    # GIVEN the demo's state file and the names `gpuwaste scan --kind` accepts (the CLI's own parser)
    from gpuwaste.commands.api import parse_kind_filter
    from gpuwaste.people import kind_names, parse_kind

    reader = FindingsReader(demo_state, GpuWasteConfig())
    # WHEN the findings are listed by the short name and by the JSON value
    short = reader.list_findings(kind="idle", limit=500)
    value = reader.list_findings(kind="idle_allocation", limit=500)
    under = reader.list_findings(kind="under-used", limit=500)
    # THEN both select the same findings, and every CLI name maps to the kind the CLI maps it to
    assert short == value and short.total > 0
    from gpuwaste.models.findings import WasteKind

    assert under == reader.list_findings(kind=WasteKind.UNDERUSED.value, limit=500)
    assert {f.kind for f in under.items} <= {WasteKind.UNDERUSED.value}
    for name in kind_names():
        kind = parse_kind(name)
        assert kind is not None and parse_kind_filter(name) == kind.value
    with pytest.raises(ReadError, match="under-used") as bad:
        reader.list_findings(kind="idel")
    assert bad.value.status == 400


def test_api_money_is_the_cli_json_money(demo_state: Path) -> None:
    # GIVEN the read functions and the API's JSON of their answers
    from decimal import Decimal

    from gpuwaste.commands.api import api_json

    reader = FindingsReader(demo_state, GpuWasteConfig())
    page = reader.list_findings(limit=500)
    body = api_json(page)
    summary = api_json(reader.summary("7d"))
    cli = CliRunner().invoke(app, ["summary", "--state", str(demo_state), "--since", "7d", "-o", "json"])
    doc = json.loads(cli.stdout)
    # THEN every money field is a decimal string to the cent, equal to the exact value rounded
    for item, view in zip(body["items"], page.items, strict=True):
        assert item["cumulative_usd"] == f"{view.cumulative_usd.quantize(Decimal('0.01'))}"
        assert len(item["cumulative_usd"].split(".")[-1]) == 2
    assert any(len(f"{v.cumulative_usd}".split(".")[-1]) > 2 for v in page.items)  # the store keeps more digits
    # AND the summary's money is what `gpuwaste summary -o json` writes
    assert cli.exit_code == 0, cli.output
    for field in ("wasted_usd", "previous_usd", "open_usd_per_day", "saved_usd_per_day", "realised_savings_usd"):
        assert summary[field] == doc[field], field
    assert [o["wasted_usd"] for o in summary["top"]] == [o["wasted_usd"] for o in doc["top"]]
    assert summary["until"].endswith("Z") and body["items"][0]["last_seen"].endswith("Z")  # times stay RFC 3339
    # AND the explain document keeps the stored finding as `scan -o json` writes it, its record rounded
    first = page.items[0]
    explain = api_json(reader.explain(first.fingerprint[:8]), exact=("finding",))
    stored = reader.explain(first.fingerprint[:8])
    assert stored.finding is not None
    assert explain["finding"] == json.loads(stored.finding.model_dump_json())
    assert explain["record"]["cumulative_usd"] == body["items"][0]["cumulative_usd"]


def test_showback_is_the_showback_command_over_the_last_scan(demo_state: Path) -> None:
    # GIVEN a reader before any scan, and the scan of the demo recording `gpuwaste showback` runs
    from gpuwaste.bootstrap import local
    from gpuwaste.commands.showback import scan_window

    reader = FindingsReader(demo_state, GpuWasteConfig())
    with pytest.raises(ReadError, match="no scan ledger") as before:
        reader.showback(["team"])
    assert before.value.status == 409
    report, cfg = scan_window(local.demo_recording(), None, None, None, None, None)
    reader = FindingsReader(demo_state, cfg)
    reader.observe_scan(report.cluster, report.showback, report.findings)
    # WHEN the showback by team and namespace is read, and printed by `gpuwaste showback -o json`
    doc = reader.showback(["team", "namespace"]).model_dump(mode="json")
    cli = CliRunner().invoke(
        app,
        ["showback", "--recording", str(local.demo_recording()), "--by", "team", "--by", "namespace", "-o", "json"],
    )
    # THEN both are the same document, to the number
    assert cli.exit_code == 0, cli.output
    assert doc == json.loads(cli.stdout)
    assert doc["conservation"]["holds"] and doc["groups"]["team"] and doc["groups"]["namespace"]
    # AND unknown or not allow-listed groupings are 400s with the CLI's words
    with pytest.raises(ReadError, match="use team, namespace, label:KEY") as unknown:
        reader.showback(["colour"])
    with pytest.raises(ReadError, match="not allow-listed") as label:
        reader.showback(["label:secret"])
    assert unknown.value.status == label.value.status == 400
    assert reader.showback(["label:team"]).groups["label:team"]
