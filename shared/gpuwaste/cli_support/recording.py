"""The recording checks of `scan`, `run` and `serve`.

A recording that cannot be scanned, an --at outside it, a window longer than it holds, and no cluster state in
it: each is one clear line, never a row per pod.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gpuwaste.cli_support import err, escape_markup, fail

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.bootstrap import local


#: How far past the last sample of a recording --at may be (one scrape interval or so of slack, plus staleness).
AT_SLACK = timedelta(minutes=5)


def held_before(sources: local.Sources, when: datetime) -> int | None:
    """Seconds of telemetry a dated recording holds up to `when` (None: live, undated or empty)."""
    rec = sources.recording
    if rec is None:
        return None
    span = rec.time_range()
    if span is None or rec.undated():
        return None
    return int((min(when, span[1]) - span[0]).total_seconds() + rec.scrape_interval_s)


def check_window(sources: local.Sources, when: datetime, window_s: int, *, given: bool = True) -> None:
    """Refuse a window longer than the recording holds before `when`: one clear error, not a row per pod (a
    `--window` given on the command line; the recording's own window is scanned as recorded: `note_short_recording`).

    Raises:
        typer.Exit: (exit 2) saying the longest window that fits.
    """
    held = held_before(sources, when)
    if held is None or window_s <= held * 1.05:
        return
    fits = max(10, held // 60)
    origin = "--window" if given else "the recording's window"
    fail(f"{origin} {_duration(window_s)} is longer than the recording holds before {when:%Y-%m-%d %H:%M} UTC "
         f"({_duration(held)} of telemetry): pass --window {fits}m or less" + (
             f", or an --at at least {_duration(window_s)} after the recording starts." if given else "."))


def note_short_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> bool:
    """Say (stderr) when a recording holds less telemetry than its own window before `when` — `gpuwaste record` at a
    time past the newest sample (the exporter or the scrape stopped): the scan keeps the recorded window and
    evaluation time, as the live scan at that time did, and the time without samples is reported as missing/stale
    telemetry (data-quality findings), never idle. Returns whether it said so."""
    held = held_before(sources, when)
    if held is None or window_s <= held * 1.05:
        return False
    if not quiet:
        err.print(f"[yellow]note:[/] the recording holds {_duration(held)} of telemetry in its {_duration(window_s)} window "
                  f"before {when:%Y-%m-%d %H:%M} UTC; the time without samples is reported as missing telemetry, "
                  "never as idle GPUs", highlight=False, soft_wrap=True)
    return True


def warn_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> None:
    """Warn (stderr) when a recording carries no cluster state."""
    if sources.recording is None or quiet:
        return
    from gpuwaste.sources.recording import RecordingClusterSource

    if isinstance(sources.cluster, RecordingClusterSource) and sources.cluster.cluster_file is None:
        err.print("[yellow]warning:[/] the recording has no cluster state (no cluster.json, no kube-state-metrics series): "
                  "GPUs cannot be tied to pods or "
                  "nodes; pass --cluster-json FILE (kubectl get pods,nodes -A -o json) to judge them.", highlight=False)


def _duration(seconds: int) -> str:
    if seconds % 60:
        return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"


def check_recording(sources: local.Sources, when: datetime | None) -> str | None:
    """Refuse recordings that cannot be scanned, and --at outside the recorded time; return the header text for
    an undated scrape (None when the recording is dated).

    Raises:
        typer.Exit: (exit 2) with what to do.
    """
    rec = sources.recording
    assert rec is not None
    rec.parsed(when)  # a bare scrape's samples are stamped at --at when given, else at the file's modification time
    if rec.dcgm_series() == 0:
        from gpuwaste.sources.recording import RecordingClusterSource

        if not isinstance(sources.cluster, RecordingClusterSource) or sources.cluster.cluster_file is None:
            fail(f"no DCGM series found in {escape_markup(str(rec.telemetry_file))} (is it a dcgm-exporter scrape?). "
                 "Scrape dcgm-exporter's /metrics (curl http://NODE:9400/metrics) or record with `gpuwaste record`.")
    if rec.undated():
        at = rec._default_time(when)
        origin = "set by --at" if when is not None else "file modification time; pass --at to set it"
        return f"undated scrape (no timestamps), evaluated at {at:%Y-%m-%d %H:%M} UTC ({origin})"
    span = rec.time_range()
    if when is not None and span is not None:
        first, last = span
        if when < first or when > last + AT_SLACK:
            fail(f"--at {when:%Y-%m-%dT%H:%M:%SZ} is outside the recording ({first:%Y-%m-%dT%H:%M:%SZ} → "
                 f"{last:%Y-%m-%dT%H:%M:%SZ}); pass an --at inside that range, or leave it out to scan at the recording's end.")
    return None


def input_hint(message: str) -> str:
    """Parser messages name the recording-format option by its old name; say the one `scan` documents."""
    return message.replace("pass --format ", "pass --input-format ")
