"""Benchmark helper: Teams digest sizes — how many Adaptive Cards a digest needs and their largest body, counted at the
fake Workflows webhook (tests/servers/teams_webhook.py), which refuses bodies over 28 KB (413).

Run: PYTHONPATH=shared:. .venv/bin/python bench/teams_cards.py
"""

from gpuwaste.models.settings import DeliverySettings, TeamsSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.sinks.teams import TeamsNotifier
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for
from tests.servers.teams_webhook import LIMIT_BYTES, FakeTeams

for n, pad in ((40, 0), (120, 200), (500, 60)):
    with FakeTeams() as teams:
        urls = {"general": teams.add_flow("general")}
        s = DeliverySettings(msteams=TeamsSettings(default_webhook="general"))
        store = SqliteFindingStore(":memory:")
        fs = [finding(f"w{i:03d}-" + "n" * pad, usd_per_day=f"{i + 1}.00") for i in range(n)]
        for f in fs:
            store.put_new(record_for(f))
        NotifyService(notifier=TeamsNotifier(s, urls, now=lambda: NOW), store=store, settings=s, now=lambda: NOW).deliver([alert(f) for f in fs])
        sizes = [p.size for p in teams.posts]
        print(f"{n} findings (name +{pad} chars): {len(sizes)} cards accepted, largest {max(sizes):,} B (limit {LIMIT_BYTES:,}), refused {len(teams.refused)}")
