"""Settings of the finding lifecycle and of delivery: routing, Slack, Microsoft Teams, the webhook, Jira, `serve`.

Pure pydantic models (no SDK, no detector), imported by the services and the sinks; the composed document is
`gpuwaste.config.GpuWasteConfig`.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuwaste.models.settings.common import ALLOW_LINK_LOCAL, MAX_USD_PER_DAY, Secret, _check_urls


class LifecycleSettings(BaseModel):
    """When the finding lifecycle (dedupe) tells an owner, opens a ticket, and calls waste resolved.

    Attributes:
        worse_share: re-alert an open finding when its USD/day rose by at least this share (0.25 = 25 %)
            over the cost last alerted.
        reminder_after: re-alert an open, unacknowledged finding when the last alert is this old.
        ticket_after: request a ticket (once) for a finding open this long...
        ticket_usd_per_day: ...or costing at least this much USD/day.
        ticket_min_observed_s: never request a ticket for a finding resting on fewer observed seconds than this
            (`Finding.observed_s`): a short window sees a bursty workload's quiet phase, not its pattern.
        resolve_after_missed_scans: consecutive scans of its cluster without the finding → resolved.
        retention_days: records expire (store TTL) this many days after their last change.
        min_usd_per_day: findings priced below this USD/day are tracked but never alerted.
        alert_data_quality: also alert data-quality findings (default: tracked only).
        heartbeat: when set (e.g. 1 h; 0, the default, writes every sighting), a sighting that changes nothing but
            the record's times (same cost, nothing to tell) is not written unless the last written sighting is this
            old — and never when it is half the finding's evidence window old, so the next written sighting's
            evidence still covers the skipped ones and the money ledger has no gap. The store's write cost then
            follows the findings that change, not the fleet. Trade-off: the stored `last_seen` lags by up to that
            window, so a scan completion delivered out of order (older than an unwritten sighting, after it) can
            count a missed scan the sighting would have made stale; the next written sighting resets the count.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    worse_share: Decimal = Field(Decimal("0.25"), gt=0, le=100)
    reminder_after: timedelta = Field(timedelta(hours=24), gt=timedelta(0))
    ticket_after: timedelta = Field(timedelta(days=3), gt=timedelta(0))
    ticket_usd_per_day: Decimal = Field(Decimal(100), ge=0, le=MAX_USD_PER_DAY)
    ticket_min_observed_s: int = Field(1800, ge=0)
    resolve_after_missed_scans: int = Field(3, ge=1, le=1000)
    retention_days: int = Field(30, ge=1, le=3650)
    min_usd_per_day: Decimal = Field(Decimal(0), ge=0, le=MAX_USD_PER_DAY)
    alert_data_quality: bool = False
    heartbeat: timedelta = Field(timedelta(0), ge=timedelta(0), le=timedelta(days=1))


class RouteTarget(BaseModel):
    """Where one namespace's or team's findings go (every field optional; unset fields fall through).

    Attributes:
        team: the owning team's name (used for the team map and the summary).
        slack_channel: channel name (`#ml-train`) or id (`C0123…`).
        slack_user_email: an owner to mention (looked up with `users.lookupByEmail`).
        jira_project: Jira project key for tickets (e.g. `MLOPS`).
        jira_labels / jira_components: added to tickets of this route.
        teams_webhook: the name of a Microsoft Teams Workflows webhook in `delivery.msteams.webhooks` (a reference: the
            URL is a secret and never appears here).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    team: str | None = None
    slack_channel: str | None = None
    slack_user_email: str | None = None
    teams_webhook: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    jira_project: str | None = Field(None, pattern=r"^[A-Z][A-Z0-9_]{1,9}$")
    jira_labels: tuple[str, ...] = ()
    jira_components: tuple[str, ...] = ()


class RoutingKeys(BaseModel):
    """Annotation/label keys read on workloads (pods) and namespaces, workload first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    team: str = "gpuwaste.io/team"
    slack_channel: str = "gpuwaste.io/slack-channel"
    slack_user: str = "gpuwaste.io/slack-user"
    jira_project: str = "gpuwaste.io/jira-project"
    snooze_until: str = "gpuwaste.io/snooze-until"


class LinkTemplates(BaseModel):
    """URL templates for links on alerts; placeholders {cluster} {namespace} {workload} {pod} {node} {kind}.

    Values are URL-quoted before substitution. Unset templates add no link.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prometheus: str | None = Field(None, pattern=r"^https?://")
    grafana: str | None = Field(None, pattern=r"^https?://")
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_urls(self) -> LinkTemplates:
        _check_urls(self, {"prometheus": self.prometheus, "grafana": self.grafana})
        return self


class SlackSettings(BaseModel):
    """Slack Web API access (bot token) and interactivity (signing secret).

    Attributes:
        bot_token / signing_secret: the secrets themselves (local use); in Lambda set the `*_secret_arn`
            fields instead (Secrets Manager; the secret holds `{"bot_token": …, "signing_secret": …}`).
        base_url: Web API base URL (tests point it at a local server).
        timeout_s: per-request timeout (seconds).
        rate_limit_retries / server_error_retries: in-process retries (429 honours `Retry-After`) before a
            delivery fails and is retried through the queue.
        max_retry_after_s: outside Lambda, a 429 whose `Retry-After` is longer than this is not waited out: the
            delivery is deferred (it stays in the outbox; `gpuwaste run` exits 4). The default 60 s covers Slack's
            per-minute rate-limit tiers; inside Lambda the invocation's time left is the cap instead.
        workspace_url: e.g. https://acme.slack.com; Jira tickets then link to the finding's Slack thread.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bot_token: Secret | None = None
    signing_secret: Secret | None = None
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    base_url: str = Field("https://slack.com/api/", pattern=r"^https?://")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    request_max_age_s: int = Field(300, ge=30, le=900)
    workspace_url: str | None = Field(None, pattern=r"^https://")
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_urls(self) -> SlackSettings:
        _check_urls(self, {"base_url": self.base_url, "workspace_url": self.workspace_url})
        return self


class TeamsSettings(BaseModel):
    """Microsoft Teams through Workflows webhooks (the "Send webhook alerts to a channel" template, or a flow with
    the "When a Teams webhook request is received" trigger): Adaptive Cards posted to a channel.

    Attributes:
        webhooks: webhook name → URL (local use). The URLs are secrets (anyone holding one can post): in Lambda set
            `secret_arn` instead (a Secrets Manager JSON object of name → URL). Routes name a webhook
            (`teams_webhook`), never its URL.
        default_webhook: the webhook used when no team/namespace route names one, and for the daily summary.
            None: Teams delivery is off.
        timeout_s: per-request timeout (seconds).
        rate_limit_retries / server_error_retries: in-process retries of a 429 (honouring `Retry-After`) and of a
            5xx before the delivery fails and is retried through the queue.
        max_payload_bytes: the size a message body is kept under (Teams refuses messages over ~28 KB).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhooks: dict[str, Secret] = Field(default_factory=dict)
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    default_webhook: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    max_payload_bytes: int = Field(27_000, ge=2_000, le=28_000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @property
    def enabled(self) -> bool:
        """Teams delivery is on (a default webhook is named)."""
        return self.default_webhook is not None

    @model_validator(mode="after")
    def _names_known(self) -> TeamsSettings:
        _check_urls(self, {f"webhooks.{name}": url.get_secret_value() for name, url in self.webhooks.items()},
                    secret=True)
        if self.default_webhook and self.webhooks and self.secret_arn is None \
                and self.default_webhook not in self.webhooks:
            raise ValueError(f"default_webhook {self.default_webhook!r} is not in webhooks "
                             f"(known: {', '.join(sorted(self.webhooks))})")
        return self


class WebhookSettings(BaseModel):
    """A generic JSON webhook (PagerDuty Events through a relay, Opsgenie, an internal bus): one signed JSON event per
    finding and action, documented in docs/delivery.md.

    Attributes:
        url / signing_secret: the endpoint and the HMAC-SHA256 key (local use); in Lambda set `secret_arn` (a JSON
            object `{"url": …, "signing_secret": …}`). The URL may hold a token: it is never logged.
        timeout_s, rate_limit_retries, server_error_retries: as for Teams.
        max_payload_bytes: events over this size drop their evidence list first (receivers cap bodies, e.g. 512 KB).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Secret | None = None
    signing_secret: Secret | None = None
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    max_payload_bytes: int = Field(256_000, ge=4_000, le=5_000_000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_url(self) -> WebhookSettings:
        _check_urls(self, {"url": self.url.get_secret_value() if self.url else None}, secret=True)
        return self

    @property
    def enabled(self) -> bool:
        """The webhook sink is on (a URL or a secret holding one is configured)."""
        return self.url is not None or self.secret_arn is not None


class JiraSettings(BaseModel):
    """Jira Cloud REST v3 access and ticket shape.

    Attributes:
        base_url: the site, e.g. https://example.atlassian.net (None: tickets are off).
        api_token / api_token_secret_arn: the Atlassian API token (Basic auth with `email`).
        default_project: project key when routing names none (None: no ticket without a routed project).
        resolve_transition: transition id or name applied when a finding resolves (None: comment only).
        set_priority: send a priority from USD/day (Highest ≥ $500, High ≥ $100, Medium ≥ $20, else Low); turn it off
            for projects whose create screen has no priority field.
        max_per_run / max_per_team: tickets opened per run, and per team per run; the overflow of a team is folded
            into one ticket listing its findings.
        quiet_start_days: for this many days after the first ticket request the caps are `quiet_start_per_run` /
            1 per team, so a first run on a large fleet opens a handful of tickets, not dozens (0: off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = Field(None, pattern=r"^https?://")
    email: str | None = None
    api_token: Secret | None = None
    api_token_secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    default_project: str | None = Field(None, pattern=r"^[A-Z][A-Z0-9_]{1,9}$")
    issue_type: str = "Task"
    labels: tuple[str, ...] = ("gpuwaste",)
    components: tuple[str, ...] = ()
    resolve_transition: str | None = None
    timeout_s: float = Field(15.0, gt=0, le=60)
    set_priority: bool = True
    max_per_run: int = Field(10, ge=1, le=1000)
    max_per_team: int = Field(3, ge=1, le=1000)
    quiet_start_days: int = Field(7, ge=0, le=90)
    quiet_start_per_run: int = Field(3, ge=1, le=1000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_url(self) -> JiraSettings:
        _check_urls(self, {"base_url": self.base_url})
        return self


class DeliverySettings(BaseModel):
    """How owners hear about findings: routing, Slack, Microsoft Teams (`msteams`), a JSON webhook, Jira, the daily
    summary. Every configured chat sink gets every alert.

    Attributes:
        default_channel: the channel used when nothing routes a finding elsewhere.
        namespaces / teams: namespace → route and team → route maps (the config fallback after annotations).
        digest_threshold: this many NEW findings for one route in one scan (or more) become one digest.
        summary_channel: where the daily summary goes (None: the default channel).
        summary_top: how many top offenders the summary lists.
        platform_owner: the owner of every cluster's nodes unless the cluster names its own
            (`clusters[].platform_owner`): node-level findings (capacity nobody requested) and findings nothing else
            routes go there. platform_owners: cluster name → owner, filled from `clusters[].platform_owner` when the
            configuration loads (set it there).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_channel: str = Field("#gpu-waste", min_length=1)
    namespaces: dict[str, RouteTarget] = Field(default_factory=dict)
    teams: dict[str, RouteTarget] = Field(default_factory=dict)
    keys: RoutingKeys = Field(default_factory=RoutingKeys)
    links: LinkTemplates = Field(default_factory=LinkTemplates)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    msteams: TeamsSettings = Field(default_factory=TeamsSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    jira: JiraSettings = Field(default_factory=JiraSettings)
    digest_threshold: int = Field(2, ge=1, le=1000)
    summary_channel: str | None = None
    summary_top: int = Field(10, ge=1, le=50)
    platform_owner: RouteTarget | None = None
    platform_owners: dict[str, RouteTarget] = Field(default_factory=dict)


class ServeSettings(BaseModel):
    """`gpuwaste serve`: the scan schedule and the metrics endpoint (docs/metrics.md).

    Attributes:
        interval_s: seconds between scans (each scan runs the whole local chain, as `gpuwaste run`).
        window_s: look-back of each scan (seconds); None: `scan.window_s`.
        host, port: where `/metrics` and `/healthz` listen (0.0.0.0 inside a cluster).
        state: the SQLite lifecycle store kept between scans (and restarts, on a persistent volume).
        top_workloads: workloads per namespace with their own series; the rest are summed into workload "other".
        savings_credit_days: days a resolved finding's saved USD/day counts towards realised savings.
        team_budgets_usd_per_day: waste budget per team (USD/day), exposed as gpuwaste_team_budget_usd_per_day for
            the GpuWasteTeamOverBudget alert; default_team_budget_usd_per_day applies to every other team with waste
            (None: no budget for them).
        team_budgets_usd_per_month: waste budget per team for a calendar month (USD/month, UTC months);
            default_team_budget_usd_per_month applies to every other team. `gpuwaste summary --month` compares the
            month-end at the current rate with it; for the alert it counts as budget ÷ the days of the month in
            USD/day (the stricter of that and a team's per-day budget is exposed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: int = Field(600, ge=1, le=86400)
    window_s: int | None = Field(None, ge=600, le=7 * 86400)
    host: str = "127.0.0.1"
    port: int = Field(9402, ge=1, le=65535)
    state: str = ".gpuwaste/state.db"
    top_workloads: int = Field(10, ge=1, le=1000)
    savings_credit_days: int = Field(30, ge=1, le=365)
    team_budgets_usd_per_day: dict[str, Decimal] = Field(default_factory=dict)
    default_team_budget_usd_per_day: Decimal | None = Field(None, ge=0)
    team_budgets_usd_per_month: dict[str, Annotated[Decimal, Field(ge=0)]] = Field(default_factory=dict)
    default_team_budget_usd_per_month: Decimal | None = Field(None, ge=0)
