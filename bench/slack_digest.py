"""Print the size of Slack digests built from the demo fleet's findings: shown characters, blocks and block text.

    PYTHONPATH=shared:. .venv/bin/python bench/slack_digest.py
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind, Route
from gpuwaste.sinks.slack_blocks import blocks_text_chars, render_notice, visible_chars


def main() -> None:
    path = local.demo_recording()
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    findings = local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(
        at=sources.recording.end_time()).findings
    priced = sorted((f for f in findings if f.usd_per_day), key=lambda f: -(f.usd_per_day or 0))
    few = [f for f in priced if f.kind in (WasteKind.IDLE, WasteKind.UNDERUSED, WasteKind.UNALLOCATED,
                                           WasteKind.INFERENCE_IDLE, WasteKind.ORPHANED)]
    few += [f.model_copy(update={"subject": f.subject.model_copy(update={"workload_name": f"{f.subject.workload_name}-2"})})
            for f in few[: max(0, 15 - len(few))]]  # a replica of a real finding under another name, up to 15
    route = Route(channel="#ml", source="namespace annotation gpuwaste.io/slack-channel", team="ml")
    for label, chosen in (("15 findings, few kinds", few[:15]), ("15 costliest (most kinds)", priced[:15])):
        items = tuple(NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=f.observed_at - timedelta(hours=2 + k),
                                 cumulative_usd=Decimal("12.34")) for k, f in enumerate(chosen))
        payloads = render_notice(Notice(kind=NoticeKind.DIGEST, route=route, items=items, scan_id="bench"))
        first = payloads[0].blocks
        print(f"{label}: {len(chosen)} findings, {len({f.kind for f in chosen})} kinds, {len(payloads)} message(s), "
              f"{len(first)} blocks, {visible_chars(first)} shown characters, {blocks_text_chars(first)} block text")


if __name__ == "__main__":
    main()
