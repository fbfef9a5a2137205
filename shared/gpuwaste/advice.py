"""Adapter (pure): what to do about a finding, from one table (kind × situation → action) that every "How to fix"
reads — the Jira ticket, the Slack alert and its Details, the Teams card, `gpuwaste explain`.

The situation is what the cluster looks like now, from the finding alone:

- the owner to act on (`Owner`): a controller that exists (Deployment, StatefulSet, ReplicaSet), a Job or CronJob,
  a bare pod, a pod whose owner is gone (then the pod, never the missing owner), a workload run by an operator
  (PyTorchJob, Notebook, ...), or a node — with all its GPUs free, or with GPUs in use by pods;
- the GPUs the pod requests now (never "fewer GPUs" at 1: then a smaller GPU or a MIG slice);
- the confidence: at low confidence the advice says "check first" and gives read-only commands only.

Every command that ends, restarts or evicts work carries a warning that says so (`Command.warning`); a read-only
command has none. `advise` never names an object the finding does not name (the pod, its owner when it exists, the
node), never drains a node with GPUs in use, and never proposes a resize to the size the workload already has.

Sources: `kubectl scale|set resources|cordon|drain` (kubernetes.io/docs/reference/kubectl), the NVIDIA device
plugin's MIG "mixed" strategy resource names (`nvidia.com/mig-1g.10gb`), GPU feature discovery's
`nvidia.com/gpu.product` node label, Kubeflow's `kubeflow-resource-stopped` notebook annotation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum

from gpuwaste.models.findings import Confidence, Finding, WasteKind
from gpuwaste.people import gpus as gpus_text
from gpuwaste.people import no_codes

#: Owner kinds whose replicas `kubectl scale` sets (and whose pod template `kubectl set resources` edits).
SCALABLE_KINDS = frozenset({"deployment", "statefulset", "replicaset"})
#: Owner kinds of batch work (a CronJob is suspended, a Job ended).
JOB_KINDS = frozenset({"job", "cronjob"})
#: Headroom kept when advising fewer GPUs (×1.25 the GPUs the average activity needs, rounded up).
GPU_HEADROOM = 1.25


class Owner(StrEnum):
    """What a fix acts on (the situation's first axis)."""

    CONTROLLER = "controller"  # a Deployment / StatefulSet / ReplicaSet that exists (or is not known to be gone)
    JOB = "job"  # a Job or CronJob
    POD = "bare pod"  # a pod without a controller
    GONE = "owner gone"  # the pod's owner is gone: only the pod is left to act on
    OPERATOR = "operator"  # a custom resource (PyTorchJob, Notebook, RayCluster ...): act through it
    NODE_FREE = "node, all GPUs free"  # a node on which no pod requests a GPU
    NODE_IN_USE = "node, GPUs in use"  # a node on which pods hold some GPUs (or where that is not known)
    NONE = "nothing named"  # no pod and no node (a cluster-wide data-quality problem)


@dataclass(frozen=True)
class Command:
    """One command people may run: its text and, when it ends, restarts or evicts work, a warning saying so."""

    text: str
    warning: str = ""

    @property
    def changes_things(self) -> bool:
        """True for a command that ends, restarts or evicts work (it carries a warning)."""
        return bool(self.warning)

    def shell(self) -> str:
        """The command as a shell line, its warning as a trailing comment."""
        return f"{self.text}   # {self.warning}" if self.warning else self.text


@dataclass(frozen=True)
class Advice:
    """What to do about one finding.

    Attributes:
        row: the table row that chose it ("idle × controller"), for tests and `explain -v`.
        action: one or two sentences for people.
        commands: what to run, read-only checks first; each that changes things carries its warning.
        caution: a line that must be read before acting ("" when none): low confidence, GPUs in use on a node.
    """

    row: str
    action: str
    commands: tuple[Command, ...] = ()
    caution: str = ""

    def lines(self) -> list[str]:
        """Action, caution and commands as text lines (for chat Details and `explain`)."""
        out = [self.action] + ([self.caution] if self.caution else [])
        return out + [f"$ {c.shell()}" for c in self.commands]


@dataclass(frozen=True)
class Situation:
    """What the cluster looks like for a finding, read from the finding alone.

    Attributes:
        owner: what a fix acts on. gpus: physical GPUs (or equivalents) the pod holds now.
        node_gpus_in_use: for node findings, GPUs requested by pods (or busy without a request) on the node.
        node_pods: the pods holding GPUs on the node, as the capacity detector names them ("" when unknown).
        low_confidence: the finding's confidence is low (advice says "check first").
    """

    owner: Owner
    gpus: Decimal = Decimal(0)
    node_gpus_in_use: float = 0.0
    node_pods: str = ""
    low_confidence: bool = False


def _evidence(finding: Finding, signal: str) -> float | None:
    for e in finding.evidence:
        if e.signal == signal:
            return e.avg
    return None


def situation(finding: Finding) -> Situation:
    """The situation of `finding` (see the module docstring); pure."""
    s = finding.subject
    low = finding.confidence is Confidence.LOW
    kind = (s.workload_kind or "").lower()
    if not s.namespace:
        if not s.node:
            return Situation(Owner.NONE, low_confidence=low)
        in_use = (_evidence(finding, "requested_gpus") or 0.0) + (_evidence(finding, "busy_unrequested_gpus") or 0.0)
        if _evidence(finding, "requested_gpus") is None:  # not a capacity finding: whether pods use GPUs is unknown
            in_use = max(in_use, float(s.physical_gpus_on_node or 1))
        pods = str(finding.details.get("gpu_pods") or "")
        return Situation(Owner.NODE_IN_USE if in_use > 0 else Owner.NODE_FREE, s.gpu_share, in_use, pods, low)
    gone = s.owner_exists is False or finding.details.get("reason") == "owner_gone"
    if gone and kind != "pod":
        owner = Owner.GONE
    elif kind in SCALABLE_KINDS:
        owner = Owner.CONTROLLER
    elif kind in JOB_KINDS:
        owner = Owner.JOB
    elif kind in ("pod", "") or not s.workload_name:
        owner = Owner.POD
    else:
        owner = Owner.OPERATOR
    return Situation(owner, s.gpu_share, low_confidence=low)


# -- targets ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    ns: str  # "-n NS " or ""
    pod: str  # "pod/NAME" or ""
    owner: str  # "deployment/NAME" (an owner that exists), else the pod
    owner_kind: str  # "Deployment", "Pod", ...
    node: str


def _target(finding: Finding, sit: Situation) -> _Target:
    s = finding.subject
    pod = f"pod/{s.pod}" if s.pod else ""
    if sit.owner in (Owner.CONTROLLER, Owner.JOB, Owner.OPERATOR) and s.workload_kind and s.workload_name:
        owner = f"{s.workload_kind.lower()}/{s.workload_name}"
        owner_kind = s.workload_kind
    else:
        owner, owner_kind = pod, "Pod"
    return _Target(f"-n {s.namespace} " if s.namespace else "", pod, owner, owner_kind, s.node or "")


def snooze_target(finding: Finding) -> str:
    """What to annotate to snooze the finding: the owner when it exists, else the pod, else the node
    ("deployment/x", "pod/p", "node/n"); "" when the finding names nothing."""
    sit = situation(finding)
    t = _target(finding, sit)
    if finding.subject.namespace:
        return t.owner or t.pod
    return f"node/{t.node}" if t.node else ""


# -- rows ---------------------------------------------------------------------------------------------------------

_Row = Callable[[Finding, Situation, _Target], Advice]


def _gpu_word(n: Decimal | float | int) -> str:
    return f"{gpus_text(Decimal(str(n)))} GPU{'' if Decimal(str(n)) == 1 else 's'}"


def _end_pod(t: _Target, sit: Situation) -> Command:
    if sit.owner in (Owner.POD, Owner.GONE):
        return Command(f"kubectl {t.ns}delete {t.pod}", "ends the pod for good: nothing recreates it (save its work first)")
    if sit.owner is Owner.JOB:
        return Command(f"kubectl {t.ns}delete {t.pod}", "ends this pod: its Job starts a new one (within its backoffLimit)")
    return Command(f"kubectl {t.ns}delete {t.pod}", f"ends this pod: its {t.owner_kind} starts a new one")


def _end_run(t: _Target) -> Command:
    """End the Job that runs the pod (named from the pod's own owner reference, never guessed)."""
    job = f"$(kubectl {t.ns}get {t.pod} -o jsonpath='{{.metadata.ownerReferences[0].name}}')"
    return Command(f"kubectl {t.ns}delete job/{job}", "ends this run: its Job and pod")


def _stop(finding: Finding, sit: Situation, t: _Target, *, why: str) -> Advice:
    """End the idle holder: scale a controller to zero, suspend a CronJob, delete a bare or ownerless pod."""
    kind = t.owner_kind.lower()
    gone = finding.subject.workload_kind or "owner"
    row = f"{finding.kind.value} × {sit.owner.value}"
    if sit.owner is Owner.CONTROLLER:
        return Advice(row, f"{why} Scale {t.owner} to zero, or share its GPUs (MIG or time-slicing).",
                      (Command(f"kubectl {t.ns}scale {t.owner} --replicas=0", f"stops every replica of {t.owner}"),))
    if sit.owner is Owner.JOB and kind == "cronjob":
        return Advice(row, f"{why} Suspend {t.owner} so no new run starts, and end the idle run.",
                      (Command(f"kubectl {t.ns}patch {t.owner} -p '{{\"spec\":{{\"suspend\":true}}}}'"),
                       *((_end_run(t),) if t.pod else ())))
    if sit.owner is Owner.JOB:
        return Advice(row, f"{why} End {t.owner} when its work is over (or give it activeDeadlineSeconds).",
                      (Command(f"kubectl {t.ns}delete {t.owner}", f"ends {t.owner} and its pods"),))
    if sit.owner is Owner.OPERATOR and kind == "notebook":
        return Advice(row, f"{why} Stop the notebook server {t.owner} (its volume stays), or move it to a shared GPU.",
                      (Command(f"kubectl {t.ns}annotate {t.owner} kubeflow-resource-stopped=$(date -u +%Y-%m-%dT%H:%M:%SZ)",
                               "stops the notebook server (its workspace volume is kept)"),))
    if sit.owner is Owner.OPERATOR:
        return Advice(row, f"{why} Stop it through its {t.owner_kind} ({t.owner}) the way it was started.",
                      (Command(f"kubectl {t.ns}get {t.owner}"),
                       Command(f"kubectl {t.ns}delete {t.owner}", f"ends the {t.owner_kind} and every pod it runs")))
    if sit.owner is Owner.GONE:
        return Advice(row, f"{why} Its owner {gone}/{finding.subject.workload_name} no longer exists, so delete the pod "
                      f"{finding.subject.pod}: nothing else will.", (_end_pod(t, sit),))
    return Advice(row, f"{why} Delete the bare pod {finding.subject.pod} (nothing recreates it), or run the work as a "
                  "Job with a deadline.", (_end_pod(t, sit),))


def _idle(f: Finding, sit: Situation, t: _Target) -> Advice:
    return _stop(f, sit, t, why="The GPUs are held but unused.")


def _inference_idle(f: Finding, sit: Situation, t: _Target) -> Advice:
    a = _stop(f, sit, t, why="The model is loaded but nobody calls it.")
    if sit.owner is Owner.CONTROLLER:
        a = replace(a, action=f"The model is loaded but nobody calls it. Scale {t.owner} to zero (KEDA / KServe "
                    "scale-to-zero brings it back on demand), or serve it beside other models on a shared GPU.")
    return a


def _orphaned(f: Finding, sit: Situation, t: _Target) -> Advice:
    reason = str(f.details.get("reason") or "")
    row = f"{f.kind.value} × {sit.owner.value}"
    if reason == "notebook_idle" or (sit.owner is Owner.OPERATOR and t.owner_kind.lower() == "notebook"):
        return _stop(f, sit, t, why="The notebook has had no activity for a long time.")
    if reason == "pending_holding":
        return Advice(row, f"The pod {f.subject.pod} is bound to its node but never started: see why (image pull, init "
                      "container, volume), then fix or delete it so its GPUs free up.",
                      (Command(f"kubectl {t.ns}describe {t.pod}"), _end_pod(t, sit)))
    if reason == "finished_job":
        return Advice(row, f"A container of {f.subject.pod} finished but the pod keeps running (a sidecar or a hung exit): "
                      "delete the pod, and make sidecars exit (native sidecar containers) or set ttlSecondsAfterFinished.",
                      (_end_pod(t, sit),))
    if sit.owner is Owner.GONE:
        return _stop(f, sit, t, why="Nobody owns this pod any more.")
    return Advice(row, f"The pod {f.subject.pod} holds GPUs that nobody uses: delete it, or run the work as a Job "
                  "with a deadline.", (_end_pod(t, sit),))


def _stalled(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    if not t.pod:
        return Advice(row, "The job looks busy but does no work: check its logs and restart it.")
    return Advice(row, "The job looks busy but is stuck (typically a hung NCCL collective or a dead rank): read its "
                  "logs, restart it, and set NCCL timeouts (TORCH_NCCL_BLOCKING_WAIT / a collective timeout).",
                  (Command(f"kubectl {t.ns}logs {t.pod} --all-containers --tail=200"), _end_pod(t, sit)))


def _fewer_gpus(f: Finding, sit: Situation) -> int | None:
    """The GPUs the average activity needs with headroom, when that is fewer than the pod holds (else None)."""
    held = sit.gpus
    if held <= 1 or held != held.to_integral_value():
        return None
    activity = f.details.get("activity_avg_ratio")
    if not isinstance(activity, int | float) or isinstance(activity, bool):
        activity = 1.0 - float(f.wasted_gpu_share / held) if held else 1.0
    need = max(1, math.ceil(float(held) * float(activity) * GPU_HEADROOM - 1e-9))
    return need if need < held else None


_RESTART = "rolling restart: every pod of {owner} is replaced (add -c CONTAINER when the pod has sidecars)"


def _underused(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    need = _fewer_gpus(f, sit)
    held = _gpu_word(sit.gpus)
    if need is None and sit.gpus < 1:
        return Advice(row + " × a GPU share",
                      f"It holds a {gpus_text(sit.gpus)}-GPU share (a MIG slice or a time-slice) and uses little of it: "
                      "use a smaller MIG profile, or put more replicas on the shared GPU.",
                      (Command("kubectl get nodes -L nvidia.com/gpu.product -L nvidia.com/mig.config"),))
    if need is None:
        return Advice(row + " × at most 1 GPU",
                      f"It holds {held} and uses little of it; there is no smaller whole-GPU request. Pack more work "
                      "onto it (batch requests), share it (time-slicing / MPS), or move to a MIG slice or a smaller GPU "
                      "model.", (Command("kubectl get nodes -L nvidia.com/gpu.product -L nvidia.com/mig.config"),))
    if sit.owner is Owner.CONTROLLER:
        return Advice(row, f"It holds {held} but its average activity needs {_gpu_word(need)}: request {need} "
                      "(or batch more work onto the GPUs it has).",
                      (Command(f"kubectl {t.ns}set resources {t.owner} --limits=nvidia.com/gpu={need} "
                               f"--requests=nvidia.com/gpu={need}", _RESTART.format(owner=t.owner)),))
    where = f"the pod template of {t.owner}" if sit.owner in (Owner.JOB, Owner.OPERATOR) else \
        f"the manifest that created pod {f.subject.pod} (then recreate it)"
    return Advice(row, f"It holds {held} but its average activity needs {_gpu_word(need)}: request "
                  f"nvidia.com/gpu: {need} in {where}.")


def _wrong_hardware(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    option = str(f.details.get("cheapest_option") or "")
    current = str(f.details.get("current_mig_profile") or "")
    if " MIG " in option:
        profile = option.rsplit(" MIG ", 1)[1].strip()
        resource = f"nvidia.com/mig-{profile}"
        if profile and profile != current and sit.owner is Owner.CONTROLLER and sit.gpus == 1:
            return Advice(row, f"Its memory and compute peaks fit a MIG {profile} slice ({option}): request that "
                          "instead of a whole GPU (nodes must offer MIG slices, device plugin \"mixed\" strategy).",
                          (Command("kubectl get nodes -o custom-columns=NODE:.metadata.name,"
                                   f"SLICES:'.status.allocatable.nvidia\\.com/mig-{profile}'"),
                           Command(f"kubectl {t.ns}set resources {t.owner} --limits=nvidia.com/gpu=0,{resource}=1 "
                                   f"--requests=nvidia.com/gpu=0,{resource}=1", _RESTART.format(owner=t.owner))))
        if profile and profile != current:
            return Advice(row, f"Its memory and compute peaks fit a MIG {profile} slice ({option}): request {resource}: 1 "
                          "instead of a whole GPU in the manifest that creates it.")
    if option:
        model = option.split()[0]
        return Advice(row, f"Its memory and compute peaks fit a {option}: move it there (set the pod template's "
                      f"nodeSelector nvidia.com/gpu.product to the {model} nodes' value).",
                      (Command(f"kubectl get nodes -L nvidia.com/gpu.product | grep -i {model}"),))
    return Advice(row, "Its memory and compute peaks fit a smaller GPU or a MIG slice: move it to the cheapest one "
                  "that keeps the headroom shown.")


def _cpu_bound(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    limit = f.details.get("cpu_limit_cores")
    if sit.owner is Owner.CONTROLLER and isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
        new = math.ceil(float(limit) * 2)
        return Advice(row, f"The GPU waits for its CPU: the container is throttled at its {limit:g}-core limit. Raise the "
                      "CPU limit (or remove it), add data-loader workers, or pre-process data offline.",
                      (Command(f"kubectl {t.ns}set resources {t.owner} --limits=cpu={new}", _RESTART.format(owner=t.owner)),))
    return Advice(row, "The GPU waits for its CPU: raise the pod's CPU limit (or remove it), add data-loader workers, or "
                  "pre-process data offline.")


def _kv_cache(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    text = ("The server is mis-sized for its traffic: raise --gpu-memory-utilization or lower --max-model-len, add a "
            "replica, or move to a GPU with more memory.")
    if sit.owner is Owner.CONTROLLER and t.owner.split("/")[0] in ("deployment", "statefulset"):
        get = f"kubectl {t.ns}get {t.owner} -o jsonpath='{{.spec.replicas}}'"
        return Advice(row, text, (Command(f"kubectl {t.ns}scale {t.owner} --replicas=$(( $({get}) + 1 ))",
                                          "adds one replica: one more GPU is requested"),))
    return Advice(row, text)


def _profile(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    text = ("The GPU burns power without computing: profile the job (Nsight Systems) for busy-wait loops, host-device "
            "copies or memory-bound kernels." if f.kind is WasteKind.POWER_ANOMALY else
            "Neither its compute nor its memory bandwidth is used much: a GPU with less memory bandwidth (L40S / L4 "
            "instead of H100 / A100) or a MIG slice does this work for less.")
    cmds = (Command(f"kubectl {t.ns}exec {t.pod} -- nvidia-smi dmon -s pucm -c 10"),) if t.pod else ()
    return Advice(row, text, cmds)


def _node_capacity(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    node = t.node
    look = Command(f"kubectl get pods -A -o wide --field-selector spec.nodeName={node}")
    if sit.owner is Owner.NODE_FREE:
        return Advice(row, f"No pod requests a GPU on {node}: let the autoscaler remove the node, shrink its node group, "
                      "or schedule pending GPU work here. Draining it evicts the pods without GPUs that run there: see "
                      "them first.",
                      (look, Command(f"kubectl cordon {node}", "no new pod is scheduled here"),
                       Command(f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data",
                               "evicts every pod on the node but DaemonSets; then the autoscaler can remove it")))
    in_use = _gpu_word(sit.node_gpus_in_use)
    return Advice(row, f"Do not drain {node}: {in_use} on it are in use. Schedule pending GPU work on its "
                  f"{_gpu_word(f.wasted_gpu_share)} no pod requests, or let the autoscaler consolidate (Karpenter, "
                  "cluster-autoscaler) once those pods can move.",
                  (look,), caution=f"In use on this node: {sit.node_pods}." if sit.node_pods else
                  f"{in_use} in use on this node: no drain.")


def _node_look(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    text = (f"A GPU on {t.node} is busy but no pod requested it (a privileged pod or a host process): find it, and "
            "request the GPU in its pod spec." if f.kind is WasteKind.UNREQUESTED_USE else
            f"Check the telemetry of {t.node or 'the cluster'}: {no_codes(f.recommendation)}")
    return Advice(row, text, (Command(f"kubectl get pods -A -o wide --field-selector spec.nodeName={t.node}"),) if t.node else ())


def _data_quality(f: Finding, sit: Situation, t: _Target) -> Advice:
    row = f"{f.kind.value} × {sit.owner.value}"
    node = t.node
    cmds = (Command(f"kubectl get pods -A -o wide --field-selector spec.nodeName={node} | grep -i dcgm"),) if node else ()
    return Advice(row, f"No verdict: {no_codes(f.recommendation)}", cmds)


def _default(f: Finding, sit: Situation, t: _Target) -> Advice:
    return Advice(f"{f.kind.value} × {sit.owner.value}", no_codes(f.recommendation))


_POD_OWNERS = (Owner.CONTROLLER, Owner.JOB, Owner.POD, Owner.GONE, Owner.OPERATOR)
_NODE_OWNERS = (Owner.NODE_FREE, Owner.NODE_IN_USE)

#: The table: (kind, owner) → the row that writes the advice. Kinds about pods have a row per pod owner, kinds
#: about nodes a row per node state; a (kind, owner) pair not listed gets `_default` (the detector's own words).
TABLE: dict[tuple[WasteKind, Owner], _Row] = {
    **{(WasteKind.IDLE, o): _idle for o in _POD_OWNERS},
    **{(WasteKind.INFERENCE_IDLE, o): _inference_idle for o in _POD_OWNERS},
    **{(WasteKind.ORPHANED, o): _orphaned for o in _POD_OWNERS},
    **{(WasteKind.STALLED, o): _stalled for o in _POD_OWNERS},
    **{(WasteKind.UNDERUSED, o): _underused for o in _POD_OWNERS},
    **{(WasteKind.WRONG_HARDWARE, o): _wrong_hardware for o in _POD_OWNERS},
    **{(WasteKind.CPU_BOUND, o): _cpu_bound for o in _POD_OWNERS},
    **{(WasteKind.KV_CACHE_PRESSURE, o): _kv_cache for o in _POD_OWNERS},
    **{(WasteKind.POWER_ANOMALY, o): _profile for o in _POD_OWNERS},
    **{(WasteKind.LOW_MEMORY_BANDWIDTH, o): _profile for o in _POD_OWNERS},
    **{(WasteKind.UNALLOCATED, o): _node_capacity for o in _NODE_OWNERS},
    # a node finding without the capacity detector's counts cannot tell free GPUs apart: "in use" (never drained)
    **{(WasteKind.UNREQUESTED_USE, o): _node_look for o in (Owner.NODE_IN_USE, Owner.NONE)},
    **{(WasteKind.DATA_QUALITY, o): _data_quality for o in (*_POD_OWNERS, Owner.NODE_IN_USE, Owner.NONE)},
}


def _checked_first(advice: Advice, finding: Finding) -> Advice:
    """Low confidence: keep the read-only commands, drop those that change things, say "check first"."""
    why = str(finding.details.get("short_observation") or "the evidence is thin")
    kept = tuple(c for c in advice.commands if not c.changes_things)
    pod = finding.subject.pod
    if not kept and pod and finding.subject.namespace:
        kept = (Command(f"kubectl -n {finding.subject.namespace} describe pod/{pod}"),)
    dropped = len(advice.commands) - sum(1 for c in advice.commands if not c.changes_things)
    action = f"Check first: confidence is low ({why}). If it holds: {advice.action}"
    caution = "Low confidence: check before you act" + (" (the commands that would change things are left out)." if dropped else ".")
    return Advice(advice.row + " × low confidence", action, kept, caution)


def advise(finding: Finding) -> Advice:
    """What to do about `finding`, from `TABLE` for its kind and situation (low confidence: read-only, "check first")."""
    sit = situation(finding)
    row = TABLE.get((finding.kind, sit.owner), _default)
    advice = row(finding, sit, _target(finding, sit))
    if sit.low_confidence:
        advice = _checked_first(advice, finding)
    return advice


__all__ = ["TABLE", "Advice", "Command", "Owner", "Situation", "advise", "situation", "snooze_target"]
