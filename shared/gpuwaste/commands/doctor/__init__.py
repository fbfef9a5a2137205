"""`gpuwaste doctor`: probe a Prometheus for every signal the detectors read, and say how to fix what is missing.

It tells "never exported" from "exported but stale", says what each detector falls back to, and prints the
dcgm-exporter CSV lines and Helm values that would enable what is missing; the same for the kube-state-metrics
series and label/annotation allow-lists a Prometheus-only scan reads its cluster state from. Its exit code gates
CI (see `EXIT_CODES`).

The package, one module per concern: `report` (the pure signal diagnosis: series counts and newest sample times
in, a report out), `ksm` (the kube-state-metrics diagnosis), `checks` (`Probe` and the table of checks,
`CHECKS`: add a check there), `render` (the text for people). This module is the command.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated

import typer

from gpuwaste.cli_support import app, check_prometheus_url, fail, parse_time
from gpuwaste.commands.doctor.checks import CHECKS, NOT_SCRAPED, Check, Probe, check_ksm
from gpuwaste.commands.doctor.ksm import KsmStatus, diagnose_ksm, ksm_key_checks, probe_ksm
from gpuwaste.commands.doctor.render import render, render_ksm, render_rules
from gpuwaste.commands.doctor.report import (
    CSV_LINES,
    DOCS,
    EXIT_CODES,
    CheckRow,
    DetectorStatus,
    DoctorReport,
    SignalStatus,
    diagnose,
    probe_names,
    verdict_code,
)
from gpuwaste.errors import GpuWasteError
from gpuwaste.models.text import for_json


class DoctorOutput(StrEnum):
    """Output formats of doctor."""

    table = "table"
    json = "json"


STRICT_HELP = ("Fail (exit 1/4) when any detector's signals are missing, not only the core ones (idle, under-used, "
               "unallocated).")


@app.command()
def doctor(
    prometheus: Annotated[str, typer.Option("--prometheus", "-p", help="Prometheus base URL.",
                                            envvar="GPUWASTE_PROMETHEUS_URL")],
    at: Annotated[str | None, typer.Option(
        "--at", help="Probe time (RFC 3339 or unix seconds); default: the server's now.")] = None,
    output: Annotated[DoctorOutput, typer.Option(
        "--output", "-o", help="table for people; json for machines.")] = DoctorOutput.table,
    as_json: Annotated[bool, typer.Option("--json", hidden=True, help="Old name of -o json.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help=STRICT_HELP)] = False,
) -> None:
    """Check that Prometheus has the signals the detectors need: fresh, stale or never exported, and how to fix it.

    Exit codes: 0 ok; 1 a needed signal was never exported, or no cluster state can be read (DCGM series but no
    kube-state-metrics: a scan of this Prometheus alone judges nothing); 2 usage error; 3 Prometheus unreachable;
    4 needed signals exist but are stale (the exporter or the scrape stopped).
    """
    from gpuwaste.models.settings import PrometheusSettings
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    check_prometheus_url(prometheus)
    when = parse_time(at)
    settings = PrometheusSettings(url=prometheus)  # a bad GPUWASTE_PROMETHEUS_* default: ConfigError, exit 2
    try:
        source = PrometheusGpuMetricsSource.from_settings(settings, cluster="doctor")
        probe = Probe(source, when, strict=strict)
        rows = [row for check in CHECKS for row in check.run(probe)]
        report = probe.report()
        rules = source.rules_status(at=when)
    except GpuWasteError as exc:
        message = str(exc)
        hint = "" if "check the url" in message.lower() else "\nCheck the URL and that Prometheus is reachable."
        fail(message + hint, code=3)
    code = verdict_code(rows)
    if as_json or output is DoctorOutput.json:
        doc = {**asdict(report), "checks": [asdict(r) for r in rows], "helm_values": report.helm_values,
               "exit_code": code, "recording_rules": rules,
               "dcgm_scraped": not any(r.check == NOT_SCRAPED for r in rows)}
        if probe.ksm is not None:
            doc["kube_state_metrics"] = {**asdict(probe.ksm), "usable": probe.ksm.usable}
        sys.stdout.write(json.dumps(for_json(doc), indent=1) + "\n")  # label values from Prometheus: no controls
    else:
        render(report, rows)
        if probe.ksm is not None:
            render_ksm(probe.ksm)
        render_rules(rules)
    if code:
        raise typer.Exit(code)


__all__ = ["CHECKS", "CSV_LINES", "DOCS", "EXIT_CODES", "Check", "CheckRow", "DetectorStatus", "DoctorReport",
           "KsmStatus", "Probe", "SignalStatus", "check_ksm", "diagnose", "diagnose_ksm", "doctor", "ksm_key_checks",
           "probe_ksm", "probe_names", "render"]
