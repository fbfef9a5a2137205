"""Service: opt-in reclaim of idle GPUs — plan, announce, (approve,) perform, keep, undo; every step recorded.

Rules (settings in `ReclaimSettings`; models in `models/reclaim.py`):

* Nothing happens unless `reclaim.enabled` and the finding's namespace opted in: `reclaim.namespaces` (namespace →
  actions) or the `gpuwaste.io/reclaim` annotation on the namespace or workload (`scale,suspend`, `all`, with
  optional `;after=24h;notice=12h`); `off` on either vetoes. Never in a system namespace.
* Only a finding that is idle (`idle_allocation`, `inference_idle`; `orphaned` for a pod whose owner is gone) with
  HIGH confidence, its own money (not superseded: no `money_owner`), seen by the current scan (its record's
  `last_scan_id` is the scan, no missed scan), open at least `idle_for`, without an active justification, snooze or
  "expected". `why_not` says which rule refused it; the same check is made again at the moment of acting.
* What is done follows the workload: Deployment/StatefulSet → scale to 0 (scale subresource), Job/CronJob →
  `spec.suspend: true`, orphaned Pod → delete, Kubeflow Notebook → the `kubeflow-resource-stopped` annotation.
* At most `max_actions_per_run` actions are planned or performed per run, and `max_actions_per_team` per team.
* Modes: `dry-run` (default) announces what would be done and never acts; `approve` acts when an approver's button
  is pressed (not before the deadline: an earlier approval is kept and acted on at the first run after it);
  `auto` acts at the first run after the deadline. The owner's "Keep" before that stores a justification and
  cancels the action.
* Each step is one conditional write of the finding's record (`FindingRecord.reclaims`): the action is claimed
  (RUNNING, with the `before` just read) before the apiserver call and DONE after it, so a repeated or redelivered
  run never performs it twice; one left RUNNING by a crash is finished without a second call when the object
  already holds the value written. A refusal (403, 404…) is recorded as FAILED and reported, never retried.
* `undo` writes `before` back (replicas, the suspend flag, the stopped annotation); a deleted pod cannot be undone.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuwaste.errors import ActionRefusedError, GpuWasteError, SourceUnavailableError, StoreError
from gpuwaste.models.findings import Confidence, Finding, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.reclaim import ReclaimAction, ReclaimKind, ReclaimMode, ReclaimStatus, ReclaimTarget
from gpuwaste.models.settings import ReclaimSettings
from gpuwaste.ports import ClusterActuator, FindingStore, ReclaimNotifier
from gpuwaste.services.justifications import justify
from gpuwaste.services.notify import finding_from_record

logger = logging.getLogger(__name__)

#: The namespace / workload annotation that opts in (or, `off`, out).
ANNOTATION = "gpuwaste.io/reclaim"
#: Finding kinds an action may be planned for: idle GPUs (and a pod holding one whose owner is gone).
RECLAIMABLE_KINDS = frozenset({WasteKind.IDLE, WasteKind.INFERENCE_IDLE, WasteKind.ORPHANED})
KEEP = "reclaim_keep"
APPROVE = "reclaim_approve"
#: Actions kept on a record (oldest dropped first).
MAX_KEPT = 10
#: How far back `undo` looks for a short action id (records active in the last this many days).
SEARCH_DAYS = 35
_OFF = frozenset({"off", "false", "no", "never", "none", "0"})
_ALL = frozenset({"all", "true", "yes", "on", "1"})
_DURATION = re.compile(r"^(\d{1,5})([mhdw])$")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
_WORKLOAD_ACTIONS = {"Deployment": ReclaimKind.SCALE, "StatefulSet": ReclaimKind.SCALE, "Job": ReclaimKind.SUSPEND,
                     "CronJob": ReclaimKind.SUSPEND, "Notebook": ReclaimKind.STOP_NOTEBOOK}


@dataclass(frozen=True)
class OptIn:
    """What a namespace or workload allows.

    The actions, after how long idle, with which notice, and where it was said.
    """

    actions: frozenset[ReclaimKind]
    idle_for: timedelta
    notice: timedelta
    source: str


def _duration(text: str) -> timedelta | None:
    match = _DURATION.match(text.strip().lower())
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]]) if match else None


def parse_annotation(value: str, settings: ReclaimSettings, source: str) -> OptIn | None:
    """A `gpuwaste.io/reclaim` value → what it allows.

    None for `off` or a value that names no known action (an unreadable value never opts in).
    """
    head, *options = [part.strip() for part in value.split(";")]
    words = {w.strip().lower() for w in head.split(",") if w.strip()}
    if not words or words & _OFF:
        return None
    actions = frozenset(ReclaimKind) if words & _ALL else frozenset(k for k in ReclaimKind if k.value in words)
    if not actions:
        logger.warning("unreadable reclaim annotation ignored", extra={"value": value[:64], "where": source})
        return None
    idle_for, notice = settings.idle_for, settings.notice
    for option in options:
        name, _, text = option.partition("=")
        parsed = _duration(text)
        if parsed is None:
            continue
        if name.strip() == "after":
            idle_for = parsed
        elif name.strip() == "notice":
            notice = parsed
    return OptIn(actions=actions, idle_for=idle_for, notice=notice, source=source)


def opt_in(finding: Finding, settings: ReclaimSettings) -> OptIn | None:
    """What the finding's workload or namespace allows.

    Looked up in the workload annotation, then the namespace annotation, then the config's `reclaim.namespaces`;
    None when it did not opt in or vetoed (`off` on the workload or namespace).
    """
    s = finding.subject
    workload = (s.annotations.get(ANNOTATION) or "").strip()
    namespace = (s.namespace_annotations.get(ANNOTATION) or "").strip()
    for value in (workload, namespace):
        if value and {w.strip().lower() for w in value.split(";")[0].split(",")} & _OFF:
            return None
    if workload:
        return parse_annotation(workload, settings, "workload annotation")
    if namespace:
        return parse_annotation(namespace, settings, "namespace annotation")
    allowed = settings.namespaces.get(s.namespace or "")
    if allowed:
        return OptIn(actions=frozenset(allowed), idle_for=settings.idle_for, notice=settings.notice,
                     source=f"reclaim.namespaces[{s.namespace}]")
    return None


def target_for(finding: Finding) -> tuple[ReclaimKind, ReclaimTarget] | None:
    """What would be done to the finding's workload, or None when nothing applies (a DaemonSet, a bare pod…)."""
    s = finding.subject
    if not s.namespace:
        return None
    if finding.kind is WasteKind.ORPHANED:
        if s.owner_exists is False and s.pod:
            return ReclaimKind.DELETE_ORPHAN, ReclaimTarget(kind="Pod", namespace=s.namespace, name=s.pod)
        return None
    action = _WORKLOAD_ACTIONS.get(s.workload_kind or "")
    if action is None or not s.workload_name:
        return None
    return action, ReclaimTarget(kind=str(s.workload_kind), namespace=s.namespace, name=s.workload_name)


def why_not(record: FindingRecord, finding: Finding | None, settings: ReclaimSettings, *, scan_id: str,
            at: datetime) -> str | None:
    """None when an action may be planned or performed for this finding at scan `scan_id`; else the rule refusing it."""
    if not settings.enabled:
        return "reclaim is not enabled"
    if record.state is not FindingState.OPEN:
        return "resolved"
    if finding is None:
        return "no stored evidence"
    if record.last_scan_id != scan_id or record.missed_scans > 0 or finding.observed_at != record.last_seen:
        return "evidence older than the current scan"
    if finding.kind not in RECLAIMABLE_KINDS:
        return f"not idle ({finding.kind.value})"
    if finding.confidence is not Confidence.HIGH:
        return f"{finding.confidence.value} confidence"
    if finding.money_owner:
        return "superseded by another finding"
    namespace = finding.subject.namespace
    if not namespace or settings.never_in(namespace):
        return f"system namespace {namespace or '(none)'}"
    j = record.justification
    if j is not None and j.active(at):
        return f"justified until {j.until:%Y-%m-%d %H:%M}Z ({j.kind} by {j.by})"
    if record.snoozed_until is not None and at < record.snoozed_until:
        return "snoozed"
    if record.acknowledged:
        return "marked expected"
    allowed = opt_in(finding, settings)
    planned = target_for(finding)
    if planned is None:
        return f"nothing to do for a {finding.subject.workload_kind or 'pod'}"
    if allowed is None or planned[0] not in allowed.actions:
        return f"{namespace} did not opt in to {planned[0].value}"
    if at - record.first_seen < allowed.idle_for:
        return f"idle for less than {allowed.idle_for}"
    return None


_GOALS: dict[ReclaimKind, dict[str, Any]] = {ReclaimKind.SCALE: {"replicas": 0}, ReclaimKind.SUSPEND: {"suspend": True},
                                             ReclaimKind.DELETE_ORPHAN: {"deleted": True}}


def _goal(kind: ReclaimKind) -> dict[str, Any]:
    """The value an action writes (what "already done" means when a crashed action is resumed)."""
    return _GOALS.get(kind, {})


def describe(action: ReclaimAction) -> str:
    """One line: what is (or would be) done to which object."""
    t = f"{action.target.kind} {action.target.namespace}/{action.target.name}"
    return {ReclaimKind.SCALE: f"scale {t} to 0 replicas", ReclaimKind.SUSPEND: f"suspend {t}",
            ReclaimKind.DELETE_ORPHAN: f"delete {t} (its owner is gone)",
            ReclaimKind.STOP_NOTEBOOK: f"stop {t} (kubeflow-resource-stopped)"}[action.kind]


@dataclass
class ReclaimReport:
    """What one run did: actions planned, performed, cancelled, refused, and findings left out by the caps."""

    planned: list[ReclaimAction] = field(default_factory=list)
    performed: list[ReclaimAction] = field(default_factory=list)
    cancelled: list[ReclaimAction] = field(default_factory=list)
    failed: list[ReclaimAction] = field(default_factory=list)
    capped: list[str] = field(default_factory=list)


class ReclaimService:
    """Plans and performs reclaim actions for one cluster's open findings (see the module docstring).

    Args:
        store: the lifecycle store (the actions live on the findings' records).
        actuator: the cluster's apiserver (None: nothing can be performed; dry-run still announces).
        notifier: announces in the owner's thread (None: recorded in the store only).
        settings: the `reclaim` section.
        now: real time (deadlines, who-did-what times).
    """

    def __init__(self, *, store: FindingStore, actuator: ClusterActuator | None, notifier: ReclaimNotifier | None,
                 settings: ReclaimSettings, now: Callable[[], datetime]) -> None:
        """Keep the collaborators (see the class docstring's Args)."""
        self.store = store
        self.actuator = actuator
        self.notifier = notifier
        self.settings = settings
        self.now = now
        #: the scan of the run in progress (None outside `run`: an approval acts at the record's latest scan)
        self._scan_id: str | None = None

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self, cluster: str, *, scan_id: str) -> ReclaimReport:
        """Decide every open finding of `cluster` against the scan `scan_id` (the cluster's latest completed scan).

        Raises:
            StoreError: the store failed (retry the run: what was written stays, nothing is done twice).
        """
        at = self.now()
        report = ReclaimReport()
        per_team: Counter[str] = Counter()
        records = sorted(self.store.open_for_cluster(cluster), key=lambda r: (-(r.usd_per_day or 0), r.fingerprint))
        for record in records:  # what an earlier run of this same scan did counts against the caps (a redelivery)
            per_team[record.team or "no owner"] += sum(
                1
                for a in record.reclaims
                if a.acted_scan_id == scan_id or (a.scan_id == scan_id and a.acted_scan_id is None)
            )
        self._scan_id = scan_id
        for record in records:
            finding = finding_from_record(record)
            pending = next((a for a in reversed(record.reclaims) if a.pending), None)
            reason = why_not(record, finding, self.settings, scan_id=scan_id, at=at)
            team = record.team or "no owner"
            if pending is not None:
                if reason is not None:
                    report.cancelled.append(self._cancel(record, pending, reason))
                    continue
                due = at >= pending.deadline and (pending.mode is ReclaimMode.AUTO or
                                                  (pending.mode is ReclaimMode.APPROVE and pending.by is not None))
                if pending.status is ReclaimStatus.RUNNING or due:
                    if not self._room(report, per_team, team, record):
                        continue
                    self._perform_into(report, record, pending, pending.by or "auto")
                    per_team[team] += 1
                continue
            if reason is not None or finding is None or self._decided_before(record):
                continue
            if not self._room(report, per_team, team, record):
                continue
            action = self._plan(record, finding, scan_id=scan_id, at=at)
            if action is None:
                continue
            report.planned.append(action)
            per_team[team] += 1
            if action.mode is ReclaimMode.AUTO and at >= action.deadline:  # no notice period: act in this run
                fresh = self.store.get(record.fingerprint)
                if fresh is not None:
                    self._perform_into(report, fresh, action, "auto")
        self._scan_id = None
        return report

    def _room(self, report: ReclaimReport, per_team: Counter[str], team: str, record: FindingRecord) -> bool:
        if (
            sum(per_team.values()) >= self.settings.max_actions_per_run
            or per_team[team] >= self.settings.max_actions_per_team
        ):
            report.capped.append(record.fingerprint)
            return False
        return True

    def _decided_before(self, record: FindingRecord) -> bool:
        """An action of this open period was already announced (dry-run), performed or undone: not planned again."""
        return any(a.status in (ReclaimStatus.DRY_RUN, ReclaimStatus.DONE, ReclaimStatus.UNDONE, ReclaimStatus.FAILED)
                   for a in record.reclaims)

    def _plan(self, record: FindingRecord, finding: Finding, *, scan_id: str, at: datetime) -> ReclaimAction | None:
        planned = target_for(finding)
        allowed = opt_in(finding, self.settings)
        if planned is None or allowed is None:
            return None
        kind, target = planned
        mode = self.settings.mode
        usd = f"${record.usd_per_day}/day" if record.usd_per_day is not None else "unpriced"
        action = ReclaimAction(
            id=f"{record.fingerprint[:12]}.{len(record.reclaims) + 1}", fingerprint=record.fingerprint, kind=kind,
            mode=mode, target=target, scan_id=scan_id, team=record.team, planned_at=at, deadline=at + allowed.notice,
            status=ReclaimStatus.DRY_RUN if mode is ReclaimMode.DRY_RUN else ReclaimStatus.NOTICED,
            evidence=(f"{finding.title}; {usd}; {finding.confidence.value} confidence over "
                      f"{finding.window_s // 60} min at scan {scan_id} ({finding.observed_at:%Y-%m-%d %H:%M}Z); "
                      f"opted in by {allowed.source}"),
        )
        if not self._write(record, action):
            return None  # another run planned it first
        what = describe(action)
        if mode is ReclaimMode.DRY_RUN:
            text = f"gpuwaste would {what} [dry-run: nothing is done]. Evidence: {action.evidence}."
        elif mode is ReclaimMode.APPROVE:
            text = (f"gpuwaste plans to {what} once a platform approver approves, not before "
                    f"{action.deadline:%Y-%m-%d %H:%M} UTC. Evidence: {action.evidence}. "
                    "Press Keep to keep it running.")
        else:
            text = (f"gpuwaste will {what} at {action.deadline:%Y-%m-%d %H:%M} UTC unless you press Keep. "
                    f"Evidence: {action.evidence}.")
        buttons = [(KEEP, "Keep", record.fingerprint)]
        if mode is ReclaimMode.APPROVE:
            buttons.append((APPROVE, "Approve", record.fingerprint))
        self._announce(record, f"{text} (action {action.id})", buttons)
        logger.info("reclaim planned", extra={"action": action.id, "kind": kind.value, "mode": mode.value})
        return action

    # -- performing -------------------------------------------------------------------------------------------
    def _perform_into(self, report: ReclaimReport, record: FindingRecord, action: ReclaimAction, by: str) -> None:
        done = self._perform(record, action, by)
        if done is None:
            return
        (report.performed if done.status is ReclaimStatus.DONE else report.failed).append(done)

    def _perform(self, record: FindingRecord, action: ReclaimAction, by: str) -> ReclaimAction | None:
        """Claim (RUNNING, with `before`), call the apiserver once, record DONE or FAILED.

        None when the claim was lost (another run has it) or the apiserver could not be reached (left RUNNING for the
        next run).
        """
        if self.actuator is None:
            return None
        try:
            current = self.actuator.read(action.kind, action.target)
        except ActionRefusedError as exc:
            return self._failed(record, action, exc, by)
        except SourceUnavailableError as exc:
            logger.warning(
                "reclaim: apiserver unreachable, retried next run", extra={"action": action.id, "error": str(exc)}
            )
            return None
        if action.status is ReclaimStatus.RUNNING:
            running, before = action, action.before
            record = self.store.get(record.fingerprint) or record
        else:
            before = current
            running = action.model_copy(update={"status": ReclaimStatus.RUNNING, "before": before, "by": by,
                                                "acted_scan_id": self._scan_id or record.last_scan_id})
            if not self._write(record, running):
                return None
            record = self.store.get(record.fingerprint) or record
        goal = _goal(action.kind)
        try:
            if goal and all(current.get(k) == v for k, v in goal.items()):
                after = dict(current)  # a crashed run's write already landed: not called again
            else:
                after = self.actuator.apply(action.kind, action.target, current)
        except ActionRefusedError as exc:
            return self._failed(record, running, exc, by)
        except SourceUnavailableError as exc:
            logger.warning(
                "reclaim: apiserver unreachable, retried next run", extra={"action": action.id, "error": str(exc)}
            )
            return None
        done = running.model_copy(update={"status": ReclaimStatus.DONE, "before": before, "after": after,
                                          "by": by, "done_at": self.now()})
        self._write(record, done, force=True)
        self._announce(record, f"{by} had gpuwaste {describe(done)}: {_fields(before)} → {_fields(after)}. "
                               f"Evidence: {done.evidence}. Undo: `gpuwaste undo {done.id}` (action {done.id}).", [])
        logger.info("reclaim performed", extra={"action": done.id, "before": str(before), "after": str(after)})
        return done

    def _failed(self, record: FindingRecord, action: ReclaimAction, exc: ActionRefusedError, by: str) -> ReclaimAction:
        failed = action.model_copy(
            update={"status": ReclaimStatus.FAILED, "error": f"{exc.status}: {exc}"[:500], "by": by}
        )
        self._write(self.store.get(record.fingerprint) or record, failed, force=True)
        self._announce(record, f"gpuwaste could not {describe(action)}: the cluster answered {exc.status} ({exc}). "
                               "Nothing was changed; it is not retried.", [])
        logger.warning("reclaim refused", extra={"action": action.id, "status": exc.status})
        return failed

    def _cancel(self, record: FindingRecord, action: ReclaimAction, reason: str) -> ReclaimAction:
        cancelled = action.model_copy(update={"status": ReclaimStatus.CANCELLED, "error": reason})
        if self._write(record, cancelled):
            self._announce(record, f"gpuwaste will not {describe(action)}: {reason} (action {action.id}).", [])
        return cancelled

    # -- buttons and undo ---------------------------------------------------------------------------------------
    def keep(self, fingerprint: str, *, by: str, reason: str | None = None, until: datetime | None = None) -> str:
        """The owner's "Keep": a justification (expected, `keep_for`) and the pending action KEPT. Returns the reply."""
        now = self.now()
        ends = until or now + self.settings.keep_for
        record = justify(self.store, fingerprint, kind="expected", reason=reason or "kept from reclaim", by=by,
                         at=now, until=ends, source="reclaim-keep")
        if record is None:
            return "unknown finding"
        pending = next((a for a in reversed(record.reclaims) if a.pending), None)
        if pending is not None and pending.status is ReclaimStatus.NOTICED:
            self._write(record, pending.model_copy(update={"status": ReclaimStatus.KEPT, "by": by}), force=True)
            return f"{by} kept it: gpuwaste will not {describe(pending)}; justified until {ends:%Y-%m-%d %H:%M} UTC."
        return f"{by} kept it: justified until {ends:%Y-%m-%d %H:%M} UTC (no action was pending)."

    def approve(self, fingerprint: str, *, by: str) -> str:
        """An approver's "Approve"; returns the reply.

        Performs the pending action now when its deadline has passed, else records the approval for the first run after
        it. Without an actuator (no cluster credentials: the Lambda), the approval is recorded and the next reclaim run
        (`gpuwaste serve` or `gpuwaste reclaim`) performs it.
        """
        if by.strip("<@>") not in self.settings.approvers:
            return f"{by} is not a reclaim approver (reclaim.approvers); nothing was done."
        record = self.store.get(fingerprint)
        pending = next((a for a in reversed(record.reclaims) if a.pending), None) if record is not None else None
        if record is None or pending is None or pending.mode is not ReclaimMode.APPROVE:
            return "no action waits for approval on this finding."
        at = self.now()
        reason = why_not(record, finding_from_record(record), self.settings, scan_id=record.last_scan_id, at=at)
        if reason is not None:
            self._cancel(record, pending, reason)
            return f"not done: {reason}."
        if at < pending.deadline or self.actuator is None:
            self._write(record, pending.model_copy(update={"by": by}), force=True)
            if self.actuator is None:  # no cluster credentials here (the Lambda): the next reclaim run performs it
                return (
                    f"{by} approved: the next reclaim run (`gpuwaste serve` with reclaim enabled, or `gpuwaste "
                    f"reclaim`), which holds the acting role, will {describe(pending)}, not before "
                    f"{pending.deadline:%Y-%m-%d %H:%M} UTC, unless the owner keeps it."
                )
            return (
                f"{by} approved: gpuwaste will {describe(pending)} after {pending.deadline:%Y-%m-%d %H:%M} UTC "
                "unless the owner keeps it."
            )
        done = self._perform(record, pending, by)
        if done is None:
            return "could not reach the cluster; the next run retries."
        return f"{by} approved: {describe(done)} → {done.status.value}."

    def undo(self, action_id: str, *, by: str) -> ReclaimAction:
        """Write the action's `before` back and record it UNDONE.

        Raises:
            ValueError: no such action, or it is not DONE. ActionRefusedError: the apiserver refused, or the kind
            cannot be undone (a deleted pod). SourceUnavailableError: unreachable. StoreError.
        """
        record, action = self._find(action_id)
        if action.status is not ReclaimStatus.DONE:
            raise ValueError(f"action {action_id} is {action.status.value}; only a done action can be undone")
        if self.actuator is None:
            raise ValueError("no cluster access to undo with")
        if action.kind is ReclaimKind.DELETE_ORPHAN:
            raise ActionRefusedError(f"action {action_id} deleted a pod whose owner was gone: nothing can restore it",
                                     status=409)
        after = self.actuator.restore(action.kind, action.target, action.before)
        undone = action.model_copy(update={"status": ReclaimStatus.UNDONE, "undone_at": self.now(), "undone_by": by})
        self._write(record, undone, force=True)
        self._announce(record, f"{by} undid action {action.id}: {describe(action)} reverted, {_fields(action.after)} → "
                               f"{_fields(after)}.", [])
        return undone

    def _find(self, action_id: str) -> tuple[FindingRecord, ReclaimAction]:
        """The record and action of an id: `<fingerprint or its first 12 characters>.<n>`.

        A short id is looked up among the records active in the last `SEARCH_DAYS` (the store's retention).
        """
        prefix = action_id.rsplit(".", 1)[0]
        exact = self.store.get(prefix)
        if exact is not None:
            candidates = [exact]
        else:
            now = self.now()
            candidates = [
                r
                for r in self.store.history(since=now - timedelta(days=SEARCH_DAYS), until=now + timedelta(days=1))
                if r.fingerprint.startswith(prefix)
            ]
        for record in candidates:
            for action in record.reclaims:
                if action.id in (action_id, f"{record.fingerprint[:12]}.{action_id.rsplit('.', 1)[-1]}") \
                        and record.fingerprint.startswith(prefix):
                    return record, action
        raise ValueError(f"no reclaim action {action_id!r} in the store (the last {SEARCH_DAYS} days)")

    # -- store and thread ---------------------------------------------------------------------------------------
    def _write(self, record: FindingRecord, action: ReclaimAction, *, force: bool = False) -> bool:
        """Put `action` (new, or replacing the one of the same id) on the record, conditionally on its version.

        `force`: re-read and retry a lost race (a state change that must land); else a lost race returns False
        (another run changed the record first: it decides).
        """
        for _ in range(5):
            others = [a for a in record.reclaims if a.id != action.id]
            updated = record.model_copy(
                update={"reclaims": (*others, action)[-MAX_KEPT:], "version": record.version + 1}
            )
            if self.store.update(updated, expected_version=record.version):
                return True
            if not force:
                return False
            fresh = self.store.get(record.fingerprint)
            if fresh is None:
                return False
            record = fresh
        raise StoreError(f"finding {record.fingerprint[:16]}: lifecycle record kept changing")

    def _announce(self, record: FindingRecord, text: str, buttons: list[tuple[str, str, str]]) -> None:
        if self.notifier is None or not record.messages:
            return
        try:
            self.notifier.announce(message=record.messages[0], text=text, buttons=buttons)
        except GpuWasteError:  # recorded in the store; only the thread misses it
            logger.warning("reclaim notice not posted", extra={"fingerprint": record.fingerprint[:16]})


def _fields(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "(nothing)"


__all__ = ["ANNOTATION", "APPROVE", "KEEP", "RECLAIMABLE_KINDS", "OptIn", "ReclaimReport", "ReclaimService",
           "describe", "opt_in", "parse_annotation", "target_for", "why_not"]
