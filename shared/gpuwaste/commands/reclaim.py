"""`gpuwaste reclaim` and `gpuwaste undo`: the opt-in reclaim pass over a local state file, and undoing an action.

`reclaim` decides the open findings of one cluster of the state (`gpuwaste run --state`) against its latest scan,
with the configuration's `reclaim` section (off unless `enabled`; dry-run unless `mode` says otherwise) and the
acting credentials (a separate, opt-in role: deploy/kubernetes/rbac-reclaim.yaml, the chart's `reclaim` role): a
kubeconfig (`--kubeconfig`/`--context`), or, inside a pod (KUBERNETES_SERVICE_HOST set) and given neither, the pod's
service account (the client's in-cluster loader: its token and CA under /var/run/secrets/kubernetes.io). `undo ID`
writes back what the action changed (replicas, the suspend flag, the stopped annotation).
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_support import DEFAULT_STATE, app, check_state_path, config_or_exit, escape_markup, fail, out
from gpuwaste.errors import GpuWasteError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuwaste.models.settings import ReclaimSettings
    from gpuwaste.services.reclaim import ReclaimService
    from gpuwaste.store.sqlite import SqliteFindingStore


def _api_client(kubeconfig: Path | None, context: str | None) -> ApiClient:
    """The acting credentials as a client: the kubeconfig given, else inside a pod the in-cluster service account.

    Without either (outside a pod), the default kubeconfig ($KUBECONFIG, ~/.kube/config). Exits 2 with the loader's
    reason when the credentials cannot be loaded.
    """
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    from gpuwaste.bootstrap.sources import KubernetesEnvironment

    if kubeconfig is None and context is None and KubernetesEnvironment().in_cluster:
        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - ConfigException or OSError for a missing/unreadable token or CA
            fail(
                f"in-cluster service account: cannot load it ({escape_markup(type(exc).__name__)}: "
                f"{escape_markup(str(exc))}); pass --kubeconfig FILE outside a pod"
            )
        return k8s_client.ApiClient(configuration)
    try:
        return k8s_config.new_client_from_config(  # type: ignore[no-untyped-call,no-any-return]  # unannotated client
            config_file=str(kubeconfig) if kubeconfig else None, context=context, persist_config=False
        )
    except Exception as exc:  # noqa: BLE001 - the client's loader raises many kinds for an unreadable kubeconfig
        fail(f"--kubeconfig: cannot load it ({escape_markup(type(exc).__name__)}: {escape_markup(str(exc))})")


def _service(
    store: SqliteFindingStore, settings: ReclaimSettings, kubeconfig: Path | None, context: str | None
) -> ReclaimService:
    from gpuwaste.services.reclaim import ReclaimService
    from gpuwaste.sinks.kube_actuator import KubernetesActuator

    return ReclaimService(
        store=store,
        actuator=KubernetesActuator(_api_client(kubeconfig, context)),
        notifier=None,
        settings=settings,
        now=lambda: datetime.now(UTC),
    )


def _open_state(state: Path) -> SqliteFindingStore:
    from gpuwaste.store.sqlite import SqliteFindingStore

    check_state_path(state)
    if not state.exists():
        fail(f"--state {escape_markup(str(state))}: no such state file (write one with `gpuwaste run --state`)")
    return SqliteFindingStore(state)


#: The options `reclaim` and `undo` share (one declaration each).
StateOpt = Annotated[Path, typer.Option("--state", help=f"SQLite state file (default {DEFAULT_STATE}).")]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="kubeconfig of the acting (opt-in) role (inside a pod, default: its service account).",
        envvar="KUBECONFIG",
    ),
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context.")]


@app.command("reclaim")
def reclaim_cmd(
    cluster: Annotated[str, typer.Option("--cluster", help="The cluster whose open findings are decided.")],
    config: Annotated[
        Path,
        typer.Option(
            "--config", "-c", help="Configuration file with a `reclaim` section (enabled, mode, namespaces…)."
        ),
    ],
    state: StateOpt = DEFAULT_STATE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Plan, announce and (in approve/auto mode, when due) perform reclaim actions for one cluster.

    Dry-run by default.
    """
    cfg = config_or_exit(config)
    store = _open_state(state)
    try:
        open_records = store.open_for_cluster(cluster)
        if not open_records:
            out.print(f"{escape_markup(cluster)}: no open findings in the state")
            return
        scan_id = max(open_records, key=lambda r: r.last_seen).last_scan_id  # the latest scan the state holds
        report = _service(store, cfg.reclaim, kubeconfig, context).run(cluster, scan_id=scan_id)
    except GpuWasteError as exc:
        fail(escape_markup(str(exc)))
    finally:
        store.close()
    from gpuwaste.services.reclaim import describe

    out.print(
        f"reclaim ({cfg.reclaim.mode.value}{'' if cfg.reclaim.enabled else ', not enabled'}) at scan "
        f"{escape_markup(scan_id)}: {len(report.planned)} planned, {len(report.performed)} performed, "
        f"{len(report.cancelled)} cancelled, {len(report.failed)} refused, {len(report.capped)} over the caps"
    )
    for label, actions in (("planned", report.planned), ("performed", report.performed), ("refused", report.failed)):
        for a in actions:
            out.print(
                f"  {label} {a.id}: {escape_markup(describe(a))}" + (f" ({escape_markup(a.error)})" if a.error else "")
            )


@app.command("undo")
def undo_cmd(
    action_id: Annotated[str, typer.Argument(help="The action's id (as the thread and `gpuwaste reclaim` print it).")],
    state: StateOpt = DEFAULT_STATE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    by: Annotated[str | None, typer.Option("--by", help="Who undoes it (default: the login name).")] = None,
) -> None:
    """Undo a reclaim action: write back the replicas, suspend flag or stopped annotation it changed."""
    from gpuwaste.models.settings import ReclaimSettings
    from gpuwaste.services.reclaim import describe

    store = _open_state(state)
    try:
        undone = _service(store, ReclaimSettings(), kubeconfig, context).undo(action_id, by=by or getpass.getuser())
    except ValueError as exc:
        fail(escape_markup(str(exc)))
    except GpuWasteError as exc:
        fail(f"not undone: {escape_markup(str(exc))}", code=1)
    finally:
        store.close()
    out.print(
        f"undone {undone.id}: {escape_markup(describe(undone))}; back to "
        f"{escape_markup(', '.join(f'{k}={v}' for k, v in sorted(undone.before.items())))}"
    )
