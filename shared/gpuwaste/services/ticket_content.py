"""Service (pure): what a Jira ticket says — a summary line with the money, a priority from USD/day, and sections
a reader acts on: what, evidence (people's units), cost and since when, how to fix (a concrete command), done
when, how to snooze, where the Slack thread is.

The Jira sink renders `TicketDraft.sections` as ADF headings, paragraphs, bullet lists and code blocks; the
terminal ticket printer renders the same document as text, so `make demo` shows what Jira would get.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from gpuwaste.advice import Owner, advise, situation, snooze_target
from gpuwaste.headlines import title_line
from gpuwaste.models.findings import Evidence, Finding, WasteKind
from gpuwaste.models.notices import TicketSection
from gpuwaste.people import evidence_text, no_codes, people_formula, per_day, per_month, plain, since_words, usd, when

#: Jira priority by USD/day wasted (first floor reached wins); below the last: "Low".
PRIORITY_FLOORS: tuple[tuple[Decimal, str], ...] = ((Decimal(500), "Highest"), (Decimal(100), "High"), (Decimal(20), "Medium"))

#: What each kind means, in one sentence for the ticket's reader.
MEANING: dict[WasteKind, str] = {
    WasteKind.IDLE: "The GPUs are allocated to the workload but do (almost) nothing.",
    WasteKind.UNDERUSED: "The workload holds more GPU than it uses: every 10-minute average stayed low.",
    WasteKind.UNALLOCATED: "GPUs on this node are paid for but no pod requests them.",
    WasteKind.POWER_ANOMALY: "The GPU draws near its power limit while doing little compute work.",
    WasteKind.LOW_MEMORY_BANDWIDTH: "The GPU is neither compute- nor memory-bound: most of it waits.",
    WasteKind.STALLED: "The GPU looks busy but does no work (no tensor or memory traffic, idle power): the job is stuck.",
    WasteKind.WRONG_HARDWARE: "The workload would fit a smaller, cheaper GPU: its memory and compute peaks are low.",
    WasteKind.CPU_BOUND: "The GPU waits for the CPU: the container is throttled by its CPU limit.",
    WasteKind.KV_CACHE_PRESSURE: "The inference server's KV cache is full: requests queue and get preempted.",
    WasteKind.INFERENCE_IDLE: "The inference server is loaded but serves no traffic.",
    WasteKind.ORPHANED: "The GPUs are held by a pod whose owner is gone or whose work has finished.",
    WasteKind.DATA_QUALITY: "The telemetry cannot be judged: no verdict, no money.",
}


def priority_for(usd_per_day: Decimal | None) -> str:
    """Jira priority from USD/day: Highest ≥ $500, High ≥ $100, Medium ≥ $20, else Low (unpriced: Medium)."""
    if usd_per_day is None:
        return "Medium"
    for floor, name in PRIORITY_FLOORS:
        if usd_per_day >= floor:
            return name
    return "Low"


def where_of(finding: Finding) -> str:
    """"namespace/workload (cluster)" or "node NAME (cluster)"."""
    s = finding.subject
    if s.namespace and (s.workload_name or s.pod):
        return f"{s.namespace}/{s.workload_name or s.pod} ({s.cluster})"
    return f"node {s.node or '-'} ({s.cluster})"


def workload_fact(finding: Finding) -> str:
    """The workload as the ticket names it: "Deployment/x", "node n", or for a pod whose owner is gone
    "Pod/p (its owner Deployment/x is gone)" — never the missing owner alone."""
    s = finding.subject
    if not s.namespace:
        return f"node {s.node or '-'}"
    if situation(finding).owner is Owner.GONE:
        return f"Pod/{s.pod} (its owner {s.workload_kind}/{s.workload_name} is gone)"
    return f"{s.workload_kind or '-'}/{s.workload_name or '-'}"


def ticket_summary(finding: Finding) -> str:
    """The summary line: money first ("$660.48/day GPU waste: idle, inference/llama-70b-vllm (demo)"); a $0 finding
    wastes nothing and is a sizing note ("GPU sizing note: KV cache, inference/chat-api-0 (demo)")."""
    title = f"{title_line(finding, 200)} ({finding.subject.cluster})"  # Jira allows 255
    if finding.usd_per_day == 0:
        return plain(title)
    money = per_day(finding.usd_per_day) if finding.usd_per_day is not None else "unpriced"
    return plain(f"{money} {title}")


def fix_commands(finding: Finding) -> list[str]:
    """The commands of the finding's advice (`gpuwaste.advice.advise`), each with its warning as a shell comment."""
    return [c.shell() for c in advise(finding).commands]


def done_when(finding: Finding) -> str:
    """When the ticket is done, in terms gpuwaste checks (it comments and resolves the ticket by itself)."""
    by_kind = {
        WasteKind.IDLE: "the GPUs are released, or their activity stays above the idle threshold for a whole scan window",
        WasteKind.UNDERUSED: "the workload requests fewer GPUs, or its 10-minute averages rise above the threshold",
        WasteKind.UNALLOCATED: "the node's GPUs are requested by pods, or the node is gone",
        WasteKind.STALLED: "the job does work again (tensor or memory traffic) or is gone",
        WasteKind.ORPHANED: "the pod is gone and its GPUs are free",
        WasteKind.CPU_BOUND: "CPU throttling stays under the threshold",
        WasteKind.KV_CACHE_PRESSURE: "the KV cache stays below its limit and no request waits",
        WasteKind.INFERENCE_IDLE: "the server is scaled to zero, shares its GPU, or serves traffic",
    }
    what = by_kind.get(finding.kind, "the next scans no longer see this waste")
    return f"{what[0].upper()}{what[1:]}."


#: How to snooze from Slack (said under "Snooze"): the action names that both the alert's buttons and a digest line's
#: overflow menu carry (`sinks/slack_blocks._ACTIONS` / `_DIGEST_MENU`; a test keeps them in step).
SLACK_SNOOZE_HINT = "In Slack: Snooze 7 days or Expected, on the alert's buttons or in the ⋯ menu beside its line in a digest."

#: How a ticket gets closed (said under "Done when").
AUTO_RESOLVE = "gpuwaste checks at every scan; once the waste is gone it comments here with the saving and resolves the ticket."


def _evidence_line(e: Evidence) -> str:
    return evidence_text(e)


def ticket_sections(finding: Finding, *, first_seen: datetime, cumulative_usd: Decimal | None, now: datetime,
                    thread_link: tuple[str, str] | None = None, snooze_key: str = "gpuwaste.io/snooze-until") -> tuple[TicketSection, ...]:
    """The ticket body: What · Evidence · Cost · How to fix · Done when · Snooze (· Slack thread)."""
    s = finding.subject
    what = [no_codes(finding.title), MEANING.get(finding.kind, "")]  # the sink drops unsafe control characters
    evidence = [plain(_evidence_line(e)) for e in finding.evidence[:5]] or ["no signal evidence (decided from cluster state)"]
    evidence.append(f"window: {finding.window_s // 60} min ending {when(finding.observed_at)}; confidence {finding.confidence.value}")
    if finding.usd_per_day == 0:  # a sizing note: no money line ("$0.00/day"), no formula
        cost = ["No GPU cost: a sizing note (no GPU time is wasted)"]
    elif finding.usd_per_day is None:
        cost = ["unpriced: no price for this instance type (add one under pricing in the config)", people_formula(finding)]
    else:
        cost = [f"{per_day(finding.usd_per_day)} ({per_month(finding.usd_per_day)})", people_formula(finding)]
    cost.append(
        (f"since {words}" if not (words := since_words(first_seen, finding, finding.observed_at)).startswith("first")
         else words[:1].upper() + words[1:])  # not str.capitalize(): it lowercases the rest ("UTC" → "utc")
        + (f"; {usd(cumulative_usd)} wasted so far" if cumulative_usd else ""))
    advice = advise(finding)
    fix = [plain(advice.action)] + ([plain(advice.caution)] if advice.caution else [])
    res = snooze_target(finding)
    target = (f"kubectl -n {s.namespace} annotate {res} {snooze_key}=YYYY-MM-DD" if s.namespace else
              f"kubectl annotate {res} {snooze_key}=YYYY-MM-DD") if res else ""
    # names both Slack surfaces carry: the alert's buttons and the digest line's overflow menu (sinks/slack_blocks)
    # a $0 sizing note has no Slack buttons or menu (nothing to act on by the money): only the annotation
    snooze = [SLACK_SNOOZE_HINT] if finding.usd_per_day != 0 else []
    if target:
        annotated = "node" if res.startswith("node/") else "workload"
        snooze += [f"{'Or annotate' if snooze else 'Annotate'} the {annotated} (until a date, or +7d):", target]
    sections = [
        TicketSection(heading="What", lines=tuple(x for x in what if x)),
        TicketSection(heading="Evidence", lines=tuple(evidence), bullets=True),
        TicketSection(heading="Cost", lines=tuple(cost), bullets=True),
        TicketSection(heading="How to fix", lines=tuple(fix), commands=tuple(plain(c) for c in fix_commands(finding))),
        TicketSection(heading="Done when", lines=(done_when(finding), AUTO_RESOLVE)),
    ]
    if snooze:  # a sizing note without an object to annotate has no way to snooze
        sections.append(TicketSection(heading="Snooze", lines=tuple(x for x in snooze if x != target),
                                      commands=(target,) if target else ()))
    if thread_link:  # (heading, URL) of the chat conversation about the finding, from its sink
        sections.append(TicketSection(heading=thread_link[0], lines=(thread_link[1],)))
    return tuple(sections)


__all__ = ["MEANING", "PRIORITY_FLOORS", "SLACK_SNOOZE_HINT", "done_when", "fix_commands", "priority_for",
           "ticket_sections", "ticket_summary", "workload_fact"]
