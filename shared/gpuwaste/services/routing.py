"""Service: owner routing (workload → namespace annotations/labels → config maps → default) and snooze parsing."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import quote

from gpuwaste.models.findings import Finding
from gpuwaste.models.notices import Route
from gpuwaste.models.settings import DeliverySettings, RouteTarget

logger = logging.getLogger(__name__)

_RELATIVE = re.compile(r"^\+?(\d+)([hdw])$")


def _lookup(finding: Finding, key: str) -> tuple[str, str] | None:
    """The first non-empty value of `key` on the workload then its namespace, with where it was found."""
    s = finding.subject
    places: tuple[tuple[str, Mapping[str, str]], ...] = (
        ("workload annotation", s.annotations),
        ("workload label", s.labels),
        ("namespace annotation", s.namespace_annotations),
        ("namespace label", s.namespace_labels),
    )
    for where, values in places:
        value = (values.get(key) or "").strip()
        if value:
            return value, f"{where} {key}"
    return None


def is_node_level(finding: Finding) -> bool:
    """A finding about a node (capacity nobody requested), not about a workload."""
    s = finding.subject
    return s.workload_kind == "Node" or (s.namespace is None and not s.workload_name)


def platform_owner(finding: Finding, settings: DeliverySettings) -> RouteTarget | None:
    """The platform owner of the finding's cluster (`clusters[].platform_owner`, else `delivery.platform_owner`)."""
    return settings.platform_owners.get(finding.subject.cluster) or settings.platform_owner


def route_for(finding: Finding, settings: DeliverySettings) -> Route:
    """Where `finding`'s owner hears about it.

    Each field is resolved on its own: workload annotation, workload label, namespace annotation, namespace
    label, then the team map (by the team found so far), then the namespace map, then the cluster's platform owner
    (for node-level findings and findings nothing else routes), then the default channel. Node-level findings carry
    node labels as `labels`, so a node can be routed too. `Route.source` says which rule chose the channel.
    """
    keys = settings.keys
    team_hit = _lookup(finding, keys.team)
    team = team_hit[0] if team_hit else None
    if team is None and finding.subject.labels.get("team"):
        team = finding.subject.labels["team"]
    ns = finding.subject.namespace
    by_ns: RouteTarget | None = settings.namespaces.get(ns) if ns else None
    if team is None and by_ns is not None and by_ns.team:
        team = by_ns.team
    by_team: RouteTarget | None = settings.teams.get(team) if team else None
    maps: tuple[tuple[str, RouteTarget | None], ...] = (
        (f"team map '{team}'", by_team),
        (f"namespace map '{ns}'", by_ns),
    )

    def pick(key: str | None, attr: str) -> tuple[str | None, str | None]:
        if key is not None and (hit := _lookup(finding, key)):
            return hit
        for where, target in maps:
            value = getattr(target, attr) if target is not None else None
            if value:
                return value, where
        return None, None

    channel, source = pick(keys.slack_channel, "slack_channel")
    platform = platform_owner(finding, settings)
    if platform is not None and team is None and (is_node_level(finding) or channel is None):
        # capacity nobody holds, or a finding nothing routes: the cluster's platform owner, never "nobody"
        team = platform.team
        by_team = settings.teams.get(team) if team else None
        maps = ((f"platform owner of cluster {finding.subject.cluster}", platform), (f"team map '{team}'", by_team))
        if channel is None:
            channel, source = pick(None, "slack_channel")
    if channel is None:
        channel, source = settings.default_channel, "default channel"
    user, _ = pick(keys.slack_user, "slack_user_email")
    project, _ = pick(keys.jira_project, "jira_project")
    labels: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    for _, target in maps:
        if target is not None:
            labels += tuple(x for x in target.jira_labels if x not in labels)
            components += tuple(x for x in target.jira_components if x not in components)
    return Route(
        channel=channel,
        source=source or "default channel",
        team=team,
        user_email=user,
        jira_project=project or settings.jira.default_project,
        jira_labels=labels,
        jira_components=components,
    )


def links_for(finding: Finding, settings: DeliverySettings) -> tuple[tuple[str, str], ...]:
    """(label, URL) pairs from the configured Prometheus/Grafana templates, values URL-quoted."""
    s = finding.subject
    values = {
        "cluster": s.cluster,
        "namespace": s.namespace or "",
        "workload": s.workload_name or "",
        "pod": s.pod or "",
        "node": s.node or "",
        "kind": finding.kind.value,
    }
    quoted = {k: quote(v, safe="") for k, v in values.items()}
    out: list[tuple[str, str]] = []
    for label, template in (("Prometheus", settings.links.prometheus), ("Grafana", settings.links.grafana)):
        if template:
            try:
                out.append((label, template.format(**quoted)))
            except (KeyError, IndexError, ValueError):
                logger.warning("link template has an unknown placeholder", extra={"link": label})
    return tuple(out)


def ticket_url_for(key: str | None, settings: DeliverySettings) -> str | None:
    """Where people open ticket `key`: the Jira site's `/browse/KEY` page (None without a key or a Jira site)."""
    base = settings.jira.base_url
    if not key or not base:
        return None
    return f"{base.rstrip('/')}/browse/{quote(key, safe='')}"


def parse_snooze_until(value: str | None, *, now: datetime) -> datetime | None:
    """Parse a `gpuwaste.io/snooze-until` value into a UTC time; None when absent or unreadable.

    Accepted: an RFC 3339 time (`2026-12-01T09:00:00Z`; a time without offset is taken as UTC), a date
    (`2026-12-01`: snoozed through that whole day, until the next midnight UTC), or a relative duration
    from `now` (`12h`, `7d`, `2w`). An unreadable value is logged and ignored (never snoozes forever).
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    rel = _RELATIVE.match(text.lower())
    if rel:
        n, unit = int(rel.group(1)), rel.group(2)
        return now.astimezone(UTC) + timedelta(hours=n) * {"h": 1, "d": 24, "w": 168}[unit]
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        logger.warning("unreadable snooze-until value ignored", extra={"value": text[:64]})
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def snoozed_until(finding: Finding, settings: DeliverySettings, *, now: datetime,
                  anchor: datetime | None = None) -> datetime | None:
    """The snooze time set by annotation on the workload (or its namespace), when it is still in the future.

    Args:
        anchor: what a relative value (`12h`, `7d`) counts from; default `now`. The lifecycle passes the
            finding's first sighting, so a relative snooze ends once instead of moving with every scan.
    """
    hit = _lookup(finding, settings.keys.snooze_until)
    until = parse_snooze_until(hit[0] if hit else None, now=anchor or now)
    return until if until is not None and until > now else None
