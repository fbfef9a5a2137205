"""People's words (pure): a finding's headline — its short title and its evidence in one line, on every surface.

Built on `gpuwaste.people` (kind names, elision, the rule text); the Slack alert's header, the Teams card's
heading, the Jira summary and a digest line's "Why" use them, so a finding is named and argued the same way
everywhere.
"""

from __future__ import annotations

from gpuwaste.models.findings import Finding
from gpuwaste.people import elide, evidence_text, kind_label, rule_text

#: Characters of a finding's people title (`title_line`): a chat header (Slack allows 150) or a card's heading.
TITLE_WIDTH = 80


def subject_words(finding: Finding) -> str:
    """What a finding is about, as its titles name it.

    "namespace/workload" (the pod without a workload), or "node NAME" for a node-level finding (no namespace).
    """
    s = finding.subject
    if s.namespace and (s.workload_name or s.pod):
        return f"{s.namespace}/{s.workload_name or s.pod}"
    return f"node {s.node or s.workload_name or '-'}"


def title_line(finding: Finding, width: int = TITLE_WIDTH) -> str:
    """A finding's short title for people, every kind alike and within `width` characters.

    "GPU waste: idle, inference/llama-70b-vllm"; a $0 finding is a sizing note ("GPU sizing note: KV cache,
    inference/chat-api-0"). The detector's whole sentence (`Finding.title`) stays in the body; only a name too long
    for `width` is shortened, in its middle (`elide`), never the sentence cut.
    """
    head = "GPU sizing note" if finding.usd_per_day == 0 else "GPU waste"
    kind = f"{head}: {kind_label(finding.kind)}, "
    return kind + elide(subject_words(finding), max(width - len(kind), 12))


def evidence_headline(finding: Finding) -> str:
    """A finding's evidence in one line (a digest line's "Why").

    The first signal whose rule it broke, the reading against the rule (`rule_text`, as the alert's Evidence states it:
    "SM activity: p95 0.8 %, flagged below 5 %"); without a rule, its first two readings ("GPUs on the node: 8; GPUs
    requested by pods: 7"); "" without evidence.
    """
    for e in finding.evidence:
        if rule := rule_text(e):
            return rule
    return "; ".join(evidence_text(e, coverage=False) for e in finding.evidence[:2])


__all__ = ["TITLE_WIDTH", "evidence_headline", "subject_words", "title_line"]
