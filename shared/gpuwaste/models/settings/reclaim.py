"""Settings: the `reclaim` section — opt-in reclaim of idle GPUs (services/reclaim.py)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from gpuwaste.models.reclaim import ReclaimKind, ReclaimMode

#: Namespaces gpuwaste never acts in, whatever a policy or annotation says (the cluster's and the GPU stack's own).
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "gpu-operator", "nvidia-gpu-operator",
                     "nvidia-device-plugin", "gpuwaste", "monitoring", "kubeflow", "istio-system", "cert-manager")


class ReclaimSettings(BaseModel):
    """Opt-in reclaim of idle GPUs (off unless `enabled`; then only in namespaces that opted in).

    A namespace opts in here (`namespaces`: name → the actions allowed) or by the `gpuwaste.io/reclaim` annotation
    on the namespace or the workload (`scale,suspend`, `all`; `off` on a workload vetoes its namespace's opt-in;
    `;after=24h;notice=12h` overrides the durations). Nothing is ever done in `system_namespaces`, for a finding
    that is not idle with high confidence at the current scan, or while a justification runs.

    Attributes:
        enabled: the master switch (False: nothing is planned, whatever the annotations say).
        mode: `dry-run` (default: announce what would be done), `approve` (an approver's button performs it),
            `auto` (performed after the notice period).
        namespaces: namespace → actions allowed there (`scale`, `suspend`, `delete-orphan`, `stop-notebook`).
        idle_for: a finding must have been open this long before an action is planned.
        notice: the time between the announcement in the owner's thread and the deadline.
        max_actions_per_run / max_actions_per_team: at most this many actions planned or performed per run, in
            all and per team.
        approvers: chat user ids allowed to approve (mode `approve`); empty: nobody can.
        keep_for: how long the owner's "Keep" justification lasts.
        system_namespaces: never acted in (added to the built-in list).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    mode: ReclaimMode = ReclaimMode.DRY_RUN
    namespaces: dict[str, list[ReclaimKind]] = Field(default_factory=dict)
    idle_for: timedelta = Field(timedelta(hours=24), ge=timedelta(0))
    notice: timedelta = Field(timedelta(hours=24), ge=timedelta(0))
    max_actions_per_run: int = Field(5, ge=0, le=1000)
    max_actions_per_team: int = Field(2, ge=0, le=1000)
    approvers: list[str] = Field(default_factory=list)
    keep_for: timedelta = Field(timedelta(days=7), gt=timedelta(0))
    system_namespaces: list[str] = Field(default_factory=list)

    def never_in(self, namespace: str) -> bool:
        """True for a system namespace (built in or configured)."""
        return namespace in SYSTEM_NAMESPACES or namespace in self.system_namespaces


__all__ = ["SYSTEM_NAMESPACES", "ReclaimSettings"]
