"""Settings: the sections of the configuration document, as pure pydantic models below the adapters.

Each adapter, service and sink takes the section it needs from here (`PrometheusSettings`, `SlackSettings`, …);
nothing here imports a detector, the join or the price book, so importing one source loads only models. The composed
document (these sections plus the detectors' settings and the price overrides) and its loading are
`gpuwaste.config`. Every section is frozen: a loaded configuration is never changed in place.
"""

from __future__ import annotations

from gpuwaste.models.settings.common import (
    ALLOW_LINK_LOCAL,
    DEFAULT_GPU_RESOURCES,
    MAX_USD_PER_DAY,
    METADATA_ADDRESSES,
    METADATA_HOSTS,
    Secret,
    outbound_url_problem,
)
from gpuwaste.models.settings.delivery import (
    DeliverySettings,
    JiraSettings,
    LifecycleSettings,
    LinkTemplates,
    RouteTarget,
    RoutingKeys,
    ServeSettings,
    SlackSettings,
    TeamsSettings,
    WebhookSettings,
)
from gpuwaste.models.settings.reclaim import SYSTEM_NAMESPACES, ReclaimSettings
from gpuwaste.models.settings.sources import (
    ClusterConfig,
    ClusterReadSettings,
    KubernetesSettings,
    PrometheusAuth,
    PrometheusSettings,
    ScanSettings,
    TelemetryLabels,
)

__all__ = [
    "ALLOW_LINK_LOCAL",
    "DEFAULT_GPU_RESOURCES",
    "MAX_USD_PER_DAY",
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "SYSTEM_NAMESPACES",
    "ClusterConfig",
    "ClusterReadSettings",
    "DeliverySettings",
    "JiraSettings",
    "KubernetesSettings",
    "LifecycleSettings",
    "LinkTemplates",
    "ReclaimSettings",
    "PrometheusAuth",
    "PrometheusSettings",
    "RouteTarget",
    "RoutingKeys",
    "Secret",
    "ScanSettings",
    "ServeSettings",
    "SlackSettings",
    "TeamsSettings",
    "TelemetryLabels",
    "WebhookSettings",
    "outbound_url_problem",
]
