"""Models (pure): text from the cluster or telemetry made safe for the surface it reaches.

Anyone who can create a pod controls its name, labels and annotations (`gpuwaste.io/team`...). Such a string must
not drive the operator's terminal (ANSI/OSC escape sequences: clear screen, move the cursor, fake text, hidden
hyperlinks), must not be read as markup by the terminal library (`[/]` crashes rich, `[link=…]` becomes a link),
and must not be read as mrkdwn by Slack (`sinks.slack_blocks.escape`) or as wiki markup by Jira (ADF text nodes).

Apply these where text reaches a surface — a table cell, an alert line, a panel — not where it enters (the
stored finding keeps the value as the cluster had it, so fingerprints and routing are unchanged).
"""

from __future__ import annotations

import re

#: ESC-introduced sequences: CSI (`ESC [ … final`), OSC (`ESC ] … BEL|ST`, e.g. OSC 8 hyperlinks), DCS/SOS/PM/APC
#: strings and two-character escapes; also the 8-bit CSI (0x9B) and OSC (0x9D) forms.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL or ST
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"     # DCS / SOS / PM / APC … ST
    r"|\x1b[@-Z\\-_]"                     # two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"             # 8-bit CSI
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"       # 8-bit OSC
)
#: C0 and C1 control characters and DEL (what is left once whole sequences are gone); bidi overrides too, which
#: reorder what the operator sees, and zero-width characters, which hide text.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")
#: What rich reads as a markup tag (its own `rich.markup.escape` rule, kept here so models stay dependency-free).
_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def strip_controls(text: str, *, keep_lines: bool = False) -> str:
    """`text` without escape sequences and control characters; each run of them becomes one space (with
    `keep_lines`, line breaks are kept and each line cleaned on its own)."""
    if not text:
        return text
    if keep_lines:
        return "\n".join(strip_controls(line) for line in _ESCAPES.sub(" ", text).splitlines())
    return " ".join(_CONTROLS.sub(" ", _ESCAPES.sub(" ", text)).split())


def escape_markup(text: str) -> str:
    """Escape what rich would read as markup (`[bold]`, `[/]`, `[link=…]`), so it prints literally."""
    def backslashes(match: re.Match[str]) -> str:
        slashes, tag = match.groups()
        return f"{slashes}{slashes}\\{tag}"

    out = _RICH_TAG.sub(backslashes, text)
    if out.endswith("\\") and not out.endswith("\\\\"):
        out += "\\"
    return out


def for_terminal(text: str | None, *, keep_lines: bool = False) -> str:
    """A cluster- or telemetry-supplied string as it may reach the terminal through rich: controls stripped,
    markup escaped. None becomes ""."""
    return escape_markup(strip_controls(text, keep_lines=keep_lines)) if text else ""


__all__ = ["escape_markup", "for_terminal", "strip_controls"]
