"""Models (pure): text from the cluster or telemetry made safe for the surface it reaches.

Anyone who can create a pod controls its name, labels and annotations (`gpuwaste.io/team`...). Such a string must
not drive the operator's terminal (ANSI/OSC escape sequences: clear screen, move the cursor, fake text, hidden
hyperlinks), must not be read as markup by the terminal library (`[/]` crashes rich, `[link=…]` becomes a link),
and must not be read as mrkdwn by Slack (`sinks.slack_blocks.escape`) or as wiki markup by Jira (ADF text nodes).
This module is the one sanitiser of every file format the product writes, too: CSV cells (`for_csv_cell`: controls
stripped, spreadsheet formulas neutralised), Prometheus/OpenMetrics label values (`for_prometheus_label`), JSON text
fields (`for_json`), Markdown (`for_markdown`: link/image/emphasis/table syntax escaped) and HTML (`for_html`).

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


#: What a spreadsheet reads as the start of a formula (OWASP "CSV injection"): `=`, `+`, `-`, `@`, tab, CR, and
#: their full-width forms, which some spreadsheets fold to ASCII.
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: Markdown characters that start inline syntax: link and image brackets (`[…](…)`, `![…](…)`: without an
#: unescaped `[` neither forms), emphasis, code spans, strike-through, table cell breaks and the escape character
#: itself; `<` and `>` (autolinks, HTML) are written as entities.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def for_csv_cell(text: str | None) -> str:
    """A text cell of a CSV file: controls stripped; a cell a spreadsheet would evaluate as a formula (starts with
    one of CSV_FORMULA_STARTS) is prefixed with a single quote, so it is shown as text (OWASP). Numbers are not
    text cells (a negative number stays a number)."""
    cell = strip_controls(text) if text else ""
    return f"'{cell}" if cell.startswith(CSV_FORMULA_STARTS) else cell


def for_prometheus_label(text: str | None) -> str:
    """A label value for the Prometheus text format or OpenMetrics: controls stripped (a terminal showing
    `curl /metrics` is not driven by it). The exposition escaping itself (backslash, double quote, line feed) is
    the writer's (prometheus_client's `generate_latest`)."""
    return strip_controls(text) if text else ""


def for_markdown(text: str | None) -> str:
    """Text for a Markdown document (GitHub-flavoured, a table cell included): controls stripped, inline syntax
    backslash-escaped (no link, image, emphasis, code span or cell break is formed) and `& < >` written as
    entities (no HTML, no autolink)."""
    if not text:
        return ""
    clean = strip_controls(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", clean)


def for_html(text: str | None) -> str:
    """Text for an HTML element or quoted attribute: controls stripped, `& < > " '` escaped."""
    import html

    return html.escape(strip_controls(text)) if text else ""


#: the control characters of `_CONTROLS` but line feed and tab (multi-line text in JSON is data, not an attack)
_CONTROLS_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")


def for_json(value: object) -> object:
    """A JSON-able document with every string in it (keys included) freed of escape sequences and control
    characters but line feed and tab (each run removed becomes one space; the text's own spacing and lines are
    kept). Other values are returned as they are."""
    if isinstance(value, str):
        return _CONTROLS_BUT_LINES.sub(" ", _ESCAPES.sub(" ", value)) if value else value
    if isinstance(value, dict):
        return {for_json(k) if isinstance(k, str) else k: for_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [for_json(v) for v in value]
    return value


__all__ = ["escape_markup", "for_csv_cell", "for_html", "for_json", "for_markdown", "for_prometheus_label",
           "for_terminal", "strip_controls"]
