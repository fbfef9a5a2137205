"""Hostile names: values anyone who can create a pod controls never change a query, ping anyone or form a link.

* PromQL: label matcher values full of PromQL syntax go to a real Prometheus (backfilled by
  ``prometheus_factory``) and select exactly the series labelled with that literal value.
* Slack: pod, namespace, workload, label and annotation values with mention, link and mrkdwn syntax are
  delivered (alert, digest, thread update, resolved edit, daily summary) to the fake Slack; in every
  mrkdwn text and fallback text posted, the only ``<…>`` sequences are the product's own links.
* Jira: the same values in a ticket stay literal text nodes of the ADF document; the only links are
  the configured ones; the summary is one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.spec import FleetSpec
from gpuwaste.models.findings import Finding
from gpuwaste.models.messages import AlertAction
from gpuwaste.models.settings import DeliverySettings, JiraSettings, LinkTemplates, PrometheusSettings, SlackSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.summary import summarize
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sources.exposition import write_openmetrics
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.sources.promql import escape_label_value, selector
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for
from tests.hardening.conftest import Figures
from tests.hardening.harness import AuditedSlack
from tests.servers.jira_api import FakeJira
from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

MENTIONS = ["<!channel>", "<!here>", "<!everyone>", "<@U123>", "<#C123>", "<!subteam^S123>",
            "<https://evil.example|click>", "<mailto:a@evil.example|mail>"]
MRKDWN = ["*bold*", "_it_", "~strike~", "`code`", "```block```", "&<>", "&lt;!channel&gt;", "> quote", ":smile:"]
JIRA = ["[click|https://evil.example]", "{panel}x{panel}", "!https://evil.example/x.png!", "[~accountid:123]",
        "{code}x{code}", "h1. title"]
NEWLINES = ["line1\nline2 <!channel>", "tab\there\r\n"]
HOSTILE = MENTIONS + MRKDWN + JIRA + NEWLINES
LINK_PREFIX = "http://prom.example/graph?"
ALLOWED_ANGLE = re.compile(r"<http://prom\.example/graph\?[^<>|\s]*\|Prometheus>")


def hostile_finding(value: str, name: str = "w", usd: str = "150.00") -> Finding:
    """A finding whose names, labels, annotations and title all carry `value`."""
    return finding(f"{name}{value}", namespace=f"ns{value}", usd_per_day=usd, title=f"GPU idle {value}",
                   labels={"app": value, "team": value}, annotations={"note": value},
                   ns_labels={"owner": value}, ns_annotations={"gpuwaste.io/team": f"team{value}"})


# -- Slack ------------------------------------------------------------------------------------------------
def mrkdwn_texts(payload: Any) -> Iterator[str]:
    """Every string Slack parses as mrkdwn: mrkdwn text objects and the top-level fallback `text`."""
    if isinstance(payload, dict):
        if payload.get("type") == "mrkdwn" and isinstance(payload.get("text"), str):
            yield payload["text"]
        for key, value in payload.items():
            if key == "text" and isinstance(value, str) and payload.get("type") is None:
                yield value  # chat.postMessage's own `text` (notification / fallback)
            elif not isinstance(value, str):
                yield from mrkdwn_texts(value)
    elif isinstance(payload, list):
        for item in payload:
            yield from mrkdwn_texts(item)


def unsafe_sequences(text: str) -> list[str]:
    """`<…>` sequences Slack would turn into a mention, channel link or link, except the product's own links."""
    stripped = ALLOWED_ANGLE.sub("", text)
    return re.findall(r"<[^>]*>?", stripped)


@pytest.fixture
def delivery(audited_slack: AuditedSlack) -> DeliverySettings:
    return DeliverySettings(
        default_channel="#gpu-waste",
        slack=SlackSettings(base_url=audited_slack.url, rate_limit_retries=0, server_error_retries=0),
        links=LinkTemplates(prometheus=LINK_PREFIX + "ns={namespace}&pod={pod}&w={workload}"),
        digest_threshold=2,
    )


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_names_never_ping_or_link_in_slack(value: str, audited_slack: AuditedSlack,
                                                   delivery: DeliverySettings, figures: Figures) -> None:
    # GIVEN findings whose every name carries the hostile value, a lifecycle store, and link templates
    figures.hostile_names += 1
    store = SqliteFindingStore(":memory:")
    notifier = SlackNotifier.from_settings(delivery.slack, token=audited_slack.token, default_channel="#gpu-waste",
                                           sleep=lambda s: None)
    notifier._now = lambda: NOW
    service = NotifyService(notifier=notifier, store=store, settings=delivery, now=lambda: NOW)
    single = hostile_finding(value, "solo", usd="120.00")
    pair = [hostile_finding(value, "a"), hostile_finding(value, "b")]
    pair = [f.model_copy(update={"subject": f.subject.model_copy(update={"namespace_annotations": {"gpuwaste.io/team": "x"}})})
            for f in pair]
    for f in [single, *pair]:
        store.put_new(record_for(f))
    # WHEN an alert, a digest, a thread update, a resolved edit and a daily summary are delivered
    service.deliver([alert(single, scan_id="s1")])
    service.deliver([alert(f, scan_id="s2") for f in pair])
    service.deliver([alert(single, AlertAction.WORSE, scan_id="s3", reason=f"cost up {value}")])
    service.deliver([alert(single, AlertAction.RESOLVED, scan_id="s4", saved_usd_per_day="120.00")])
    summary = summarize([record_for(f, team=f"team{value}") for f in [single, *pair]], since=NOW - timedelta(days=1),
                        until=NOW + timedelta(hours=1), team_of=lambda r: r.team or "-")
    notifier.post_summary(summary, channel="#gpu-waste", chart_png=None)
    # THEN every call was accepted, the hostile text reached Slack escaped, and no mrkdwn text holds a
    # `<…>` sequence other than the product's own Prometheus links (no mention, no foreign link)
    calls = [c for c in audited_slack.calls if c.method in ("chat.postMessage", "chat.update")]
    assert len(audited_slack.accepted) == len(calls) >= 5
    texts = [t for c in calls for t in mrkdwn_texts(c.body)]
    assert texts
    bad = [(t[:80], s) for t in texts for s in unsafe_sequences(t)]
    assert bad == []
    links = [m for t in texts for m in ALLOWED_ANGLE.findall(t)]
    assert links, "the configured links were formed"
    assert all("://evil" not in link for link in links), "hostile values only appear URL-quoted inside the link"


@pytest.mark.parametrize("value", ["<!channel>", "<https://evil.example|click>", "&<>"])
def test_hostile_names_are_shown_escaped_not_dropped(value: str, audited_slack: AuditedSlack,
                                                     delivery: DeliverySettings) -> None:
    # GIVEN a finding named with the hostile value
    notifier = SlackNotifier.from_settings(delivery.slack, token=audited_slack.token, default_channel="#gpu-waste",
                                           sleep=lambda s: None)
    service = NotifyService(notifier=notifier, store=None, settings=delivery, now=lambda: NOW)
    f = hostile_finding(value)
    # WHEN delivered
    service.deliver([alert(f)])
    # THEN the owner still sees the name, in Slack's escaped form
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    (body,) = audited_slack.calls_to("chat.postMessage")
    assert escaped in json.dumps(body["blocks"], ensure_ascii=False)


def test_hostile_names_checker_catches_an_unescaped_mention() -> None:
    # GIVEN mrkdwn texts as a broken renderer would produce them
    # WHEN checked / THEN each mention or foreign link is found, the product's own link is not
    assert unsafe_sequences("owner <!channel> please") == ["<!channel>"]
    assert unsafe_sequences("see <https://evil.example|click>") == ["<https://evil.example|click>"]
    assert unsafe_sequences("hi <@U123>") == ["<@U123>"]
    assert unsafe_sequences(f"<{LINK_PREFIX}ns=a%3C|Prometheus>") == []
    assert unsafe_sequences(f"<{LINK_PREFIX}ns=a|<!here>|Prometheus>") != []


# -- Jira -------------------------------------------------------------------------------------------------
ADF_NODES = {"doc", "paragraph", "text", "bulletList", "listItem", "heading", "hardBreak", "rule", "codeBlock"}
ADF_MARKS = {"strong", "em", "code", "link"}


def adf_walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.get("content") or []:
            yield from adf_walk(child)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_names_stay_literal_text_in_jira(value: str, jira_api: FakeJira, figures: Figures) -> None:
    # GIVEN a ticket for a finding whose every name carries the hostile value
    figures.hostile_names += 1
    settings = DeliverySettings(jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, default_project="OPS"),
                                links=LinkTemplates(prometheus=LINK_PREFIX + "ns={namespace}&pod={pod}"))
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    service = TicketService(sink=sink, store=None, settings=settings, now=lambda: NOW)
    f = hostile_finding(value)
    # WHEN the ticket is created
    key = service.handle(alert(f, AlertAction.ESCALATE))
    issue = jira_api.issues[str(key)]
    nodes = list(adf_walk(issue.fields["description"]))
    texts = "".join(n.get("text", "") for n in nodes if n.get("type") == "text")
    hrefs = [m["attrs"]["href"] for n in nodes for m in n.get("marks") or [] if m.get("type") == "link"]
    # THEN the description is plain ADF: known node and mark types, the hostile value as literal text,
    # and only the configured links
    assert {n["type"] for n in nodes} <= ADF_NODES
    assert {m["type"] for n in nodes for m in n.get("marks") or []} <= ADF_MARKS
    assert value.strip() in texts or value.split("\n")[0] in texts
    assert hrefs and all(h.startswith(LINK_PREFIX) for h in hrefs)
    assert all("://evil" not in h for h in hrefs)


@pytest.mark.parametrize("value", NEWLINES)
def test_hostile_names_jira_summary_is_one_line(value: str, jira_api: FakeJira) -> None:
    # GIVEN a finding whose namespace and workload contain line breaks
    settings = DeliverySettings(jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, default_project="OPS"))
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    service = TicketService(sink=sink, store=None, settings=settings, now=lambda: NOW)
    # WHEN the ticket is created
    key = service.handle(alert(hostile_finding(value), AlertAction.ESCALATE))
    # THEN its summary is a single line without control characters (Jira Cloud rejects line breaks)
    summary = jira_api.issues[str(key)].fields["summary"]
    assert not re.search(r"[\x00-\x1f]", summary)


# -- PromQL against a real Prometheus ----------------------------------------------------------------------
PROMQL_HOSTILE = ['a"b\\c\n{}=~', 'x"} or vector(1) or {y="', ".*", "|", "\\", '"', "} > 0 or up{", "a\\\"b",
                  "名前", "$1", "'; drop", "benign"]


@pytest.fixture(scope="module")
def tenant_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, set[str]], Any]:
    """A small fleet whose GPU series carry a `tenant` label, each GPU one value of PROMQL_HOSTILE."""
    spec = FleetSpec(layout="random", nodes=3, seed=5, label_style="pod", cluster="hostile",
                     instance_types=("g5.12xlarge", "g6.xlarge"), history_s=1500)
    fleet = generate_fleet(spec)
    uuids = sorted({s.labels["UUID"] for s in fleet.iter_series() if s.labels.get("UUID")})
    tenant = {u: PROMQL_HOSTILE[i % len(PROMQL_HOSTILE)] for i, u in enumerate(uuids)}
    series = []
    for s in fleet.iter_series():
        if s.labels.get("UUID") in tenant:
            s.labels["tenant"] = tenant[s.labels["UUID"]]
        series.append(s)
    path = tmp_path_factory.mktemp("hostile-promql") / "telemetry.om"
    with path.open("w") as out:
        write_openmetrics(series, out, types={"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter"})
    expected: dict[str, set[str]] = {}
    for u, t in tenant.items():
        expected.setdefault(t, set()).add(u)
    return path, expected, spec


def test_hostile_names_in_matchers_select_exactly_their_literal_series(
        tenant_recording: tuple[Path, dict[str, set[str]], Any], prometheus_factory: PrometheusFactory,
        figures: Figures) -> None:
    # GIVEN a real Prometheus whose GPUs are labelled tenant=<hostile value>, one value per GPU
    path, expected, spec = tenant_recording
    url = prometheus_factory(path).url
    seen: dict[str, set[str]] = {}
    # WHEN the scan's whole query plan runs with each hostile value as a matcher
    for value in expected:
        figures.hostile_names += 1
        source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url), cluster="hostile",
                                                          matchers={"tenant": value}, scrape_interval_s=spec.step_s)
        window = source.telemetry(at=spec.eval_time, window=timedelta(seconds=spec.history_s - 600))
        seen[value] = {g.device.uuid for g in window.gpus}
    # THEN every value was taken literally: it selected exactly the GPUs carrying it, nothing more
    assert seen == expected


@pytest.mark.parametrize("value", PROMQL_HOSTILE)
def test_hostile_names_escape_keeps_the_selector_one_matcher(value: str) -> None:
    # GIVEN a hostile matcher value
    # WHEN put into a selector
    sel = selector(["DCGM_FI_DEV_GPU_UTIL"], {"tenant": value})
    # THEN the escaped value sits inside one quoted string: unescaped quotes only delimit it
    escaped = escape_label_value(value)
    assert f'tenant="{escaped}"' in sel
    assert "\n" not in escaped and not re.search(r'(?<!\\)"', escaped.replace('\\\\', ''))


# -- the terminal -----------------------------------------------------------------------------------------
TERMINAL = {
    "ansi clear screen + colour": "\x1b[2J\x1b[H\x1b[31mFAKE: all clear",
    "osc 8 hidden hyperlink": "\x1b]8;;https://evil.example\x1b\\click me\x1b]8;;\x1b\\",
    "rich closing tag": "team[/]",
    "rich link markup": "[link=https://evil.example]docs[/link]",
    "rich style markup": "[bold red]URGENT[/bold red]",
    "c1 csi + bidi override": "\x9b31m\u202eevil",
}


def _hostile_recording(tmp: Path, team: str) -> Path:
    """The demo recording with every pod labelled `gpuwaste.io/team: <team>` (what anyone who creates a pod sets)."""
    import shutil

    from gpuwaste.bootstrap.local import demo_recording

    target = tmp / "rec"
    shutil.copytree(demo_recording(), target)
    doc = json.loads((target / "cluster.json").read_text())
    for item in doc["items"]:
        if item["kind"] == "Pod":
            item["metadata"].setdefault("labels", {})["gpuwaste.io/team"] = team
            item["metadata"].setdefault("annotations", {})["note"] = team
    (target / "cluster.json").write_text(json.dumps(doc))
    return target


@pytest.mark.parametrize("name", sorted(TERMINAL))
def test_hostile_names_never_drive_the_terminal_or_crash_it(name: str, tmp_path: Path, figures: Figures) -> None:
    # GIVEN the demo fleet whose pods carry a hostile team label
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    rec = _hostile_recording(tmp_path, TERMINAL[name])
    runner = CliRunner()
    # WHEN `scan` and `run` (terminal output, Slack previews, tickets, summary) show it, on a colour terminal
    results = [runner.invoke(app, ["scan", "--recording", str(rec)], env={"COLUMNS": "400", "FORCE_COLOR": "1"}),
               runner.invoke(app, ["run", "--recording", str(rec), "--state", str(tmp_path / "s.db")],
                             env={"COLUMNS": "400", "FORCE_COLOR": "1"})]
    figures.hostile_names += 1
    for result in results:
        # THEN no traceback, and the output holds no escape sequence but the terminal library's own colours
        assert result.exit_code == 0, result.output[-2000:]
        assert "Traceback" not in result.output
        foreign = re.sub(r"\x1b\[[0-9;]*m", "", result.output)  # rich's own SGR colour codes
        assert "\x1b" not in foreign and "\x9b" not in foreign and "\u202e" not in foreign
        # ... no hyperlink was formed (rich writes links as OSC 8) and the markup was shown, not obeyed
        assert "\x1b]8;" not in result.output
        if name.startswith("rich"):
            literal = TERMINAL[name]
            assert literal in re.sub(r"\x1b\[[0-9;]*m", "", result.output).replace("\n", ""), name


# -- every output format ----------------------------------------------------------------------------------
#: values that attack a format: terminal escapes (every output may end up in a terminal: `cat`, `curl /metrics`),
#: spreadsheet formulas, Markdown links and images, HTML, and exposition-format syntax
FORMAT_HOSTILE = {
    **TERMINAL,
    "csv hyperlink formula": '=HYPERLINK("https://evil.example/x","click")',
    "csv plus formula": "+1+cmd|' /C calc'!A0",
    "csv minus formula": "-2+3",
    "csv at formula": "@SUM(1+1)",
    "csv tab then formula": "\t=1+1",
    "markdown link": "[click](https://evil.example)",
    "markdown image": "![pixel](https://evil.example/t.png)",
    "markdown html": "<img src=x onerror=alert(1)>",
    "markdown emphasis and cell": "*bold*|cell`code`",
    "exposition quote backslash newline": 'a"b\\c\nevil_metric{x="1"} 1',
}
#: control characters no written text may hold (C0 but line ends, DEL, C1, bidi overrides and isolates, zero-width)
FOREIGN_CONTROLS = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
CSV_TEXT_COLUMNS = ("kind", "idle_mode", "cluster", "namespace", "workload_kind", "workload", "pod", "node",
                    "gpu_model", "instance_type", "confidence", "signal", "formula", "fingerprint", "title", "team")


def _format_findings(value: str) -> list[Finding]:
    """Three priced findings whose namespace, workload/pod, labels, annotations and title carry `value`; the first
    one's namespace and workload are exactly `value` (a cell, a label value that starts with it)."""
    first = finding(value, namespace=value, usd_per_day="150.00", title=value, labels={"app": value, "team": value},
                    annotations={"note": value})
    return [first, hostile_finding(value, "w1", usd="90.00"), hostile_finding(value, "w2", usd="40.00")]


def _outputs(value: str) -> dict[str, bytes]:
    """Every file format the product writes, for findings named with `value`: the bytes as written."""
    from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
    from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text
    from gpuwaste.sinks.summary_report import render_html, render_json, render_markdown
    from gpuwaste.sinks.terminal import to_csv, to_json

    findings = _format_findings(value)
    team = value
    health = health_of_scan(f"c{value}", at=NOW, duration_s=1.0, window_s=3600, gpus=3, findings=findings,
                            no_verdict_detectors=[])
    snapshot = snapshot_of_scan(findings, health, DeliverySettings(), top=10)
    summary = summarize([record_for(f, team=team) for f in findings], since=NOW - timedelta(days=1),
                        until=NOW + timedelta(hours=1), team_of=lambda r: r.team or "-")
    return {
        "csv": to_csv(findings, team=lambda f: team).encode(),
        "json": to_json(findings, team=lambda f: team).encode(),
        "prometheus": render_text(snapshot),
        "openmetrics": render_openmetrics(snapshot),
        "summary markdown": render_markdown(summary).encode(),
        "summary html": render_html(summary).encode(),
        "summary json": render_json(summary).encode(),
    }


def _check_csv(data: bytes) -> list[str]:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    problems = [f"row {n} {col}: {row[col][:40]!r}" for n, row in enumerate(rows) for col in CSV_TEXT_COLUMNS
                if row[col][:1] in ("=", "+", "-", "@", "\t", "\r")]
    return problems + ([] if rows else ["no rows"])


def _check_exposition(data: bytes, *, openmetrics: bool) -> list[str]:
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families  # type: ignore[assignment]
    families = list(text_string_to_metric_families(data.decode()))  # raises on a broken exposition
    names = {f.name for f in families}
    problems = [f"injected family {n}" for n in names if "evil" in n]
    labels = [v for f in families for s in f.samples for v in s.labels.values()]
    problems += [f"label value with a control: {v!r}" for v in labels if FOREIGN_CONTROLS.search(v) or "\n" in v]
    return problems + ([] if any(f.name.startswith("gpuwaste_waste_usd_per_day") for f in families) else ["no waste"])


def _strings(doc: Any) -> Iterator[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)


def _check_json(data: bytes) -> list[str]:
    # a line feed or tab inside a JSON string is data (written escaped), not an attack on whoever prints it
    return [f"string with a control: {s[:60]!r}" for s in _strings(json.loads(data))
            if FOREIGN_CONTROLS.search(s.replace("\t", " ")) or "\r" in s]


def _check_markdown(data: bytes) -> list[str]:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").enable("strikethrough").parse(data.decode())
    bad = []
    for token in tokens:
        for t in [token, *(token.children or [])]:
            if t.type in ("link_open", "image", "html_inline", "html_block", "code_inline", "em_open", "s_open"):
                bad.append(f"{t.type}: {(t.content or str(t.attrs))[:60]!r}")
    return bad


def _check_html(data: bytes) -> list[str]:
    from html.parser import HTMLParser

    bad: list[str] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("script", "iframe", "a") or (tag == "img" and "evil" in str(attrs)):
                bad.append(f"<{tag} {attrs}>")
            bad.extend(f"<{tag}> {k}={v!r}" for k, v in attrs if k.startswith("on") or "evil" in str(v))

    Tags().feed(data.decode())
    return bad


FORMAT_CHECKS = {"csv": _check_csv, "json": _check_json, "summary json": _check_json,
                 "prometheus": lambda d: _check_exposition(d, openmetrics=False),
                 "openmetrics": lambda d: _check_exposition(d, openmetrics=True),
                 "summary markdown": _check_markdown, "summary html": _check_html}


@pytest.mark.parametrize("name", sorted(FORMAT_HOSTILE))
def test_hostile_names_every_output_format_writes_inert_bytes(name: str, figures: Figures) -> None:
    # GIVEN findings whose namespace, workload, pod, labels, annotations, title and team carry the hostile value
    value = FORMAT_HOSTILE[name]
    figures.hostile_names += 1
    # WHEN written as CSV, JSON, Prometheus text, OpenMetrics and the Markdown / HTML / JSON summary
    outputs = _outputs(value)
    # THEN no file holds a terminal escape or other control character (line ends aside) ...
    for fmt, data in outputs.items():
        text = data.decode()
        assert "\x1b" not in text and "\x9b" not in text, fmt
        assert not FOREIGN_CONTROLS.search(text.replace("\r\n", "\n")), (fmt, FOREIGN_CONTROLS.findall(text))
    # ... and, read back by a parser of the format, no formula, injected series, link, image, HTML or markup
    problems = {fmt: check(outputs[fmt]) for fmt, check in FORMAT_CHECKS.items()}
    assert problems == {fmt: [] for fmt in FORMAT_CHECKS}
    # ... while the name is still there to read (only the dangerous characters were changed)
    visible = re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\]8;;[^\x1b]*\x1b\\|\x9b[0-9;]*[A-Za-z]|[\x00-\x1f\x7f-\x9f\u202e]", " ",
                     value)
    word = max(re.findall(r"[A-Za-z]{3,}", visible) or [visible.strip()], key=len)
    assert all(word in data.decode() for data in outputs.values()), word


@pytest.mark.parametrize("name", ["csv hyperlink formula", "exposition quote backslash newline",
                                  "ansi clear screen + colour", "markdown link"])
def test_hostile_names_every_output_format_of_the_cli(name: str, tmp_path: Path) -> None:
    # GIVEN the demo fleet whose pods carry a hostile team label
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    value = FORMAT_HOSTILE[name]
    rec = _hostile_recording(tmp_path, value)
    state = str(tmp_path / "s.db")
    runner = CliRunner()
    # WHEN `scan` writes each machine format and `summary` each report format (after a run filled the state)
    outputs = {fmt: runner.invoke(app, ["scan", "--recording", str(rec), "-o", fmt]) for fmt in
               ("csv", "json", "prometheus", "openmetrics")}
    assert runner.invoke(app, ["run", "--recording", str(rec), "--state", state, "-q"]).exit_code == 0
    outputs |= {f"summary {fmt}": runner.invoke(app, ["summary", "--state", state, "-o", fmt])
                for fmt in ("markdown", "html", "json")}
    # THEN each succeeded, holds the team, and its bytes pass the format's checks
    for fmt, result in outputs.items():
        assert result.exit_code == 0, (fmt, result.output[-500:])
        data = result.stdout_bytes
        assert b"\x1b" not in data and b"\xc2\x9b" not in data, fmt
        assert not FOREIGN_CONTROLS.search(data.decode().replace("\r\n", "\n")), fmt
    problems = {fmt: check(outputs[fmt].stdout_bytes) for fmt, check in FORMAT_CHECKS.items()}
    assert problems == {fmt: [] for fmt in FORMAT_CHECKS}


@pytest.mark.parametrize("openmetrics", [False, True])
def test_hostile_names_exposition_never_repeats_a_series(openmetrics: bool) -> None:
    # GIVEN two workloads whose names and teams differ only in control characters (one series once stripped)
    from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
    from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text

    findings = [finding("w", namespace="ns", usd_per_day="100.00", ns_annotations={"gpuwaste.io/team": "a"}),
                finding("w\x07", namespace="ns", usd_per_day="150.00", ns_annotations={"gpuwaste.io/team": "a\x1b[0m"})]
    health = health_of_scan("c", at=NOW, duration_s=1.0, window_s=3600, gpus=2, findings=findings,
                            no_verdict_detectors=[])
    # WHEN exposed
    snapshot = snapshot_of_scan(findings, health, DeliverySettings(), top=10)
    data = (render_openmetrics if openmetrics else render_text)(snapshot).decode()
    # THEN every series appears once (a repeated one fails the whole scrape) and the USD/day adds up
    series = [line.rsplit(" ", 1)[0] for line in data.splitlines() if line and not line.startswith("#")]
    assert len(series) == len(set(series))
    usd = [line for line in data.splitlines() if line.startswith("gpuwaste_waste_usd_per_day{")]
    assert len(usd) == 1 and float(usd[0].rsplit(" ", 1)[1]) == 250.0, usd
