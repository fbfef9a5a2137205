"""Models: reclaim actions — what gpuwaste may do to an idle GPU's workload, and the record of what it did.

An action is planned from a finding at one scan, announced in the owner's thread with a deadline, then (by mode)
performed by an approver's button or automatically after the notice, kept (the owner's "Keep": a justification),
or cancelled when the evidence no longer holds. Every state change is one conditional write of the finding's
lifecycle record (`FindingRecord.reclaims`), so a redelivered or repeated run finds what was already done.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from gpuwaste.models.base import Frozen


class ReclaimKind(StrEnum):
    """What may be done (the names used in `reclaim.namespaces` and the `gpuwaste.io/reclaim` annotation)."""

    SCALE = "scale"  # Deployment / StatefulSet: spec.replicas → 0 through the scale subresource
    SUSPEND = "suspend"  # Job / CronJob: spec.suspend → true
    DELETE_ORPHAN = "delete-orphan"  # a pod whose owner is gone: deleted (not undoable: nothing recreates it)
    STOP_NOTEBOOK = "stop-notebook"  # Kubeflow Notebook: the kubeflow-resource-stopped annotation set


class ReclaimMode(StrEnum):
    """How planned actions are performed: never (`dry-run`, the default: say what would be done), on an approver's
    button (`approve`), or by gpuwaste after the notice period (`auto`)."""

    DRY_RUN = "dry-run"
    APPROVE = "approve"
    AUTO = "auto"


class ReclaimStatus(StrEnum):
    """Where an action stands."""

    DRY_RUN = "dry-run"  # announced as what would be done; never performed
    NOTICED = "noticed"  # announced with a deadline; waiting (auto) or for an approver (approve)
    RUNNING = "running"  # claimed for the apiserver call (a crash leaves it here; the next run finishes it)
    DONE = "done"
    KEPT = "kept"  # the owner pressed Keep (a justification was stored)
    CANCELLED = "cancelled"  # the evidence no longer held at the deadline (not idle, justified, resolved…)
    FAILED = "failed"  # the apiserver refused (403 reported, never retried as another verb)
    UNDONE = "undone"


class ReclaimTarget(Frozen):
    """The object acted on: `kind` as the apiserver names it (Deployment, StatefulSet, Job, CronJob, Pod, Notebook)."""

    kind: str
    namespace: str
    name: str
    uid: str | None = None


class ReclaimAction(Frozen):
    """One planned or performed action and its record.

    Attributes:
        id: `<fingerprint[:12]>.<n>` (what `gpuwaste undo` takes).
        fingerprint / scan_id: the finding and the scan whose evidence planned it.
        evidence: the finding's title, USD/day, confidence and window at that scan (what the owner read).
        deadline: when `auto` performs it (planned + the notice period).
        acted_scan_id: the scan of the run that performed it (the per-run caps count by scan, so a repeated run of
            the same scan adds nothing).
        by: who performed (`auto`, an approver's mention) / kept / undid it.
        before / after: the fields it changed, as read from and written to the apiserver (`spec.replicas`,
            `spec.suspend`, the stopped annotation, the deleted pod's uid).
        error: the apiserver's refusal (status and message) when FAILED.
    """

    id: str
    fingerprint: str
    kind: ReclaimKind
    mode: ReclaimMode
    target: ReclaimTarget
    status: ReclaimStatus
    scan_id: str
    team: str | None = None
    evidence: str = ""
    planned_at: datetime
    deadline: datetime
    by: str | None = None
    done_at: datetime | None = None
    acted_scan_id: str | None = None
    before: dict[str, Any] = Field(default_factory=dict)
    after: dict[str, Any] = Field(default_factory=dict)
    undone_at: datetime | None = None
    undone_by: str | None = None
    error: str | None = None

    @property
    def pending(self) -> bool:
        """Announced and not yet decided (NOTICED or RUNNING)."""
        return self.status in (ReclaimStatus.NOTICED, ReclaimStatus.RUNNING)


__all__ = ["ReclaimAction", "ReclaimKind", "ReclaimMode", "ReclaimStatus", "ReclaimTarget"]
