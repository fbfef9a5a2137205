"""Test-side renderers: Slack Block Kit messages and Jira ADF documents as HTML, close to how Slack and Jira show them.

Used to look at what the demo delivers (screenshots in headless Chromium, issue 22's closing note) and by
``tests/unit/test_render_shots.py``, which fails when a payload uses a block, element or node type this renderer does not
know — so a new type is seen, not silently dropped. Not part of the product.

Inputs: a Slack message is the ``chat.postMessage`` / ``chat.update`` body (``{"channel", "text", "blocks": [...]}``,
``blocks`` a list or its JSON string); an ADF document is REST v3's ``{"type": "doc", "version": 1, "content": [...]}``.
Errors: :class:`UnknownTypeError` for a block, element, composition object, ADF node or mark not handled here.

Run as a script to render a capture: ``python -m tests.tools.render_shots SLACK_MESSAGES.json JIRA_ISSUES.json OUT_DIR``
(the JSON files are lists of message bodies / ``{"key", "fields": {"summary", "description", ...}}``); it writes
``slack.html`` and ``jira-<KEY>.html`` per issue.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["UnknownTypeError", "adf_html", "jira_issue_page", "mrkdwn_html", "slack_block_html", "slack_page"]


class UnknownTypeError(ValueError):
    """A Block Kit or ADF type the renderer does not handle (the message names it and where it was met)."""


_SLACK_CSS = """
body{font-family:Lato,'Helvetica Neue',Arial,sans-serif;font-size:15px;color:#1d1c1d;margin:0;background:#fff}
.msg{display:flex;padding:8px 20px;border-bottom:1px solid #eee}.avatar{width:36px;height:36px;border-radius:4px;
background:#76b900;color:#fff;font-weight:700;display:flex;align-items:center;justify-content:center;margin-right:8px;
flex:none}.who{font-weight:900}.who small{font-weight:400;color:#616061;margin-left:6px;font-size:12px}
.chan{padding:10px 20px;font-weight:900;border-bottom:1px solid #ddd;font-size:18px}
.hdr{font-size:18px;font-weight:900;margin:4px 0}.sec{display:flex;justify-content:space-between;margin:4px 0;
line-height:1.45}.sec .t{flex:1;white-space:pre-wrap}.flds{display:grid;grid-template-columns:1fr 1fr;gap:4px 16px;
margin-top:4px}.ctx{color:#616061;font-size:12px;margin:4px 0;white-space:pre-wrap}.ctx img{width:16px;height:16px}
.div{border-top:1px solid #ddd;margin:8px 0}.btn{display:inline-block;border:1px solid #bbb;border-radius:4px;
padding:3px 12px;margin:4px 6px 4px 0;font-weight:700;font-size:13px}.btn.primary{background:#007a5a;color:#fff;
border-color:#007a5a}.btn.danger{color:#e01e5a;border-color:#e01e5a}.ovf{border:1px solid #bbb;border-radius:4px;
padding:0 8px;height:26px;font-weight:900;margin-left:8px;flex:none}.ovf-opts{display:none}
code{font-family:Monaco,Menlo,monospace;font-size:12px;color:#e01e5a;background:#f6f6f6;border:1px solid #ddd;
border-radius:3px;padding:0 2px}pre{font-family:Monaco,Menlo,monospace;font-size:12px;background:#f8f8f8;
border:1px solid #ddd;border-radius:4px;padding:8px;white-space:pre-wrap}a{color:#1264a3;text-decoration:none}
.emoji{color:#616061}.img{color:#616061;font-style:italic}
"""

_JIRA_CSS = """
body{font-family:-apple-system,'Segoe UI',Roboto,Arial,sans-serif;font-size:14px;color:#172b4d;margin:0;background:#fff}
.top{border-bottom:1px solid #dfe1e6;padding:10px 40px;color:#5e6c84;font-size:13px}
.main{display:flex;padding:16px 40px;gap:32px}.left{flex:1;min-width:0}.right{width:300px;flex:none}
h1.summary{font-size:24px;font-weight:500;margin:8px 0 16px}.lbl{font-weight:600;margin:16px 0 6px}
.desc{line-height:1.6}.desc h1{font-size:20px}.desc h2{font-size:18px}.desc h3{font-size:16px}.desc h4{font-size:14px}
.desc h1,.desc h2,.desc h3,.desc h4{margin:18px 0 6px;font-weight:600}.desc p{margin:6px 0}
.desc pre{background:#f4f5f7;border-radius:3px;padding:8px 12px;font-family:SFMono-Regular,Menlo,monospace;font-size:12px;
white-space:pre-wrap}.desc code{background:#f4f5f7;font-family:SFMono-Regular,Menlo,monospace;font-size:12px;
padding:1px 3px;border-radius:3px}.desc table{border-collapse:collapse;margin:8px 0}.desc td,.desc th{border:1px solid #c1c7d0;
padding:4px 8px;text-align:left;vertical-align:top}.desc th{background:#f4f5f7}a{color:#0052cc;text-decoration:none}
.panel{background:#deebff;border-radius:3px;padding:8px 12px;margin:8px 0}.panel.warning{background:#fffae6}
.panel.error{background:#ffebe6}.panel.success{background:#e3fcef}.panel.note{background:#eae6ff}
.box{border:1px solid #dfe1e6;border-radius:3px;padding:8px 12px}.box div{display:flex;justify-content:space-between;
margin:6px 0}.box span:first-child{color:#5e6c84}.lozenge{background:#dfe1e6;border-radius:3px;padding:0 4px;
font-size:11px;font-weight:700;text-transform:uppercase}.tag{background:#dfe1e6;border-radius:3px;padding:0 4px;
margin:2px;display:inline-block;font-size:12px}.status{font-size:11px;font-weight:700;background:#dfe1e6;
border-radius:3px;padding:2px 4px;text-transform:uppercase}
"""

_EMOJI = {
    "warning": "⚠️",
    "white_check_mark": "✅",
    "x": "❌",
    "zzz": "💤",
    "moneybag": "💰",
    "fire": "🔥",
    "chart_with_downwards_trend": "📉",
    "mag": "🔍",
    "ticket": "🎫",
    "information_source": "ℹ️",
}


def mrkdwn_html(text: str) -> str:
    """Slack ``mrkdwn`` → HTML: ``*bold*``, ``_italic_``, ``~strike~``, `` `code` ``, fenced code, ``> quote``,
    ``<url|text>`` / ``<url>`` / ``<#C..>`` / ``<@U..>`` links and ``:emoji:`` codes; the rest escaped, newlines kept."""
    parts = re.split(r"(```.*?```|`[^`\n]+`)", text, flags=re.S)
    out: list[str] = []
    for part in parts:
        if part.startswith("```") and part.endswith("```") and len(part) >= 6:
            out.append(f"<pre>{html.escape(part[3:-3])}</pre>")
        elif part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            out.append(_inline(part))
    return "".join(out)


def _inline(text: str) -> str:
    links: list[str] = []

    def _link(m: re.Match[str]) -> str:
        target, _, label = m.group(1).partition("|")
        if target.startswith(("#", "@", "!")):
            shown = "#" + (label or target[1:]) if target.startswith("#") else "@" + (label or target[1:])
            links.append(f'<a href="#">{html.escape(shown)}</a>')
        else:
            links.append(f'<a href="{html.escape(target)}">{html.escape(label or target)}</a>')
        return f"\x00{len(links) - 1}\x00"

    text = re.sub(r"<([^<>]+)>", _link, text)
    text = html.escape(text, quote=False)
    text = re.sub(r"(?m)^&gt; ?(.*)$", r'<span style="border-left:4px solid #ddd;padding-left:8px">\1</span>', text)
    text = re.sub(r"(?<![\w*])\*(?!\s)([^*\n]+?)\*(?![\w*])", r"<b>\1</b>", text)
    text = re.sub(r"(?<![\w])_(?!\s)([^_\n]+?)_(?![\w])", r"<i>\1</i>", text)
    text = re.sub(r"(?<![\w~])~(?!\s)([^~\n]+?)~(?![\w~])", r"<s>\1</s>", text)
    text = re.sub(
        r":([a-z0-9_+\-]+):", lambda m: _EMOJI.get(m.group(1), f'<span class="emoji">:{m.group(1)}:</span>'), text
    )
    return re.sub(r"\x00(\d+)\x00", lambda m: links[int(m.group(1))], text)


def _text_obj(obj: dict[str, Any], where: str) -> str:
    kind = obj.get("type")
    if kind == "mrkdwn":
        return mrkdwn_html(str(obj.get("text", "")))
    if kind == "plain_text":
        return html.escape(str(obj.get("text", "")))
    raise UnknownTypeError(f"text object type {kind!r} in {where}")


def _element(el: dict[str, Any], where: str) -> str:
    kind = el.get("type")
    if kind == "button":
        style = el.get("style", "")
        label = _text_obj(el["text"], f"{where}/button")
        if "url" in el:
            return f'<a class="btn {style}" href="{html.escape(el["url"])}">{label}</a>'
        return f'<span class="btn {style}">{label}</span>'
    if kind == "overflow":
        opts = "".join(f"<li>{_text_obj(o['text'], f'{where}/overflow')}</li>" for o in el.get("options", []))
        return (
            f'<span class="ovf" title="{len(el.get("options", []))} options">⋯</span><ul class="ovf-opts">{opts}</ul>'
        )
    if kind in ("static_select", "users_select", "conversations_select", "channels_select"):
        ph = _text_obj(el["placeholder"], where) if "placeholder" in el else "Select"
        return f'<span class="btn">{ph} ▾</span>'
    if kind == "image":
        return f'<span class="img">[image: {html.escape(str(el.get("alt_text", "")))}]</span>'
    if kind in ("mrkdwn", "plain_text"):
        return _text_obj(el, where)
    raise UnknownTypeError(f"element type {kind!r} in {where}")


def slack_block_html(block: dict[str, Any]) -> str:
    """One Block Kit block → HTML (header, section, context, actions, divider, image, rich_text not handled)."""
    kind = block.get("type")
    if kind == "header":
        return f'<div class="hdr">{_text_obj(block["text"], "header")}</div>'
    if kind == "divider":
        return '<div class="div"></div>'
    if kind == "section":
        body = _text_obj(block["text"], "section") if "text" in block else ""
        if block.get("fields"):
            body += (
                '<div class="flds">'
                + "".join(f"<div>{_text_obj(f, 'section/fields')}</div>" for f in block["fields"])
                + "</div>"
            )
        acc = _element(block["accessory"], "section/accessory") if "accessory" in block else ""
        return f'<div class="sec"><div class="t">{body}</div>{acc}</div>'
    if kind == "context":
        return '<div class="ctx">' + " ".join(_element(e, "context") for e in block.get("elements", [])) + "</div>"
    if kind == "actions":
        return "<div>" + "".join(_element(e, "actions") for e in block.get("elements", [])) + "</div>"
    if kind == "image":
        return _element(block, "image block")
    raise UnknownTypeError(f"block type {kind!r}")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = message.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def slack_page(messages: list[dict[str, Any]], channel: str = "gpu-waste") -> str:
    """A Slack channel page: each message (its ``blocks``, or its ``text`` when it has none) under a bot header."""
    rows = []
    for message in messages:
        blocks = _blocks(message)
        body = "".join(slack_block_html(b) for b in blocks) if blocks else mrkdwn_html(str(message.get("text", "")))
        rows.append(
            '<div class="msg"><div class="avatar">GW</div><div style="flex:1;min-width:0">'
            '<div class="who">gpuwaste<small>APP 01:20</small></div>' + body + "</div></div>"
        )
    return (
        f"<!doctype html><meta charset=utf-8><style>{_SLACK_CSS}</style>"
        f'<div class="chan"># {html.escape(channel)}</div>' + "".join(rows)
    )


_MARKS = {
    "strong": ("<b>", "</b>"),
    "em": ("<i>", "</i>"),
    "code": ("<code>", "</code>"),
    "strike": ("<s>", "</s>"),
    "underline": ("<u>", "</u>"),
    "subsup": ("<sup>", "</sup>"),
    "textColor": ("<span>", "</span>"),
}


def _adf_text(node: dict[str, Any]) -> str:
    out = html.escape(str(node.get("text", "")))
    for mark in node.get("marks", []):
        kind = mark.get("type")
        if kind == "link":
            out = f'<a href="{html.escape(str(mark.get("attrs", {}).get("href", "")))}">{out}</a>'
        elif kind in _MARKS:
            start, end = _MARKS[kind]
            out = f"{start}{out}{end}"
        else:
            raise UnknownTypeError(f"ADF mark {kind!r}")
    return out


def adf_html(node: dict[str, Any]) -> str:
    """An ADF node (a ``doc`` or any node in it) → HTML: paragraph, heading, bullet/ordered lists, table, codeBlock,
    panel, rule, blockquote, hardBreak, inlineCard, status, mention, emoji and text with its marks."""
    kind = node.get("type")
    inner = "".join(adf_html(c) for c in node.get("content", []))
    attrs = node.get("attrs", {})
    simple = {
        "doc": ("<div>", "</div>"),
        "paragraph": ("<p>", "</p>"),
        "bulletList": ("<ul>", "</ul>"),
        "orderedList": ("<ol>", "</ol>"),
        "listItem": ("<li>", "</li>"),
        "blockquote": ("<blockquote>", "</blockquote>"),
        "tableRow": ("<tr>", "</tr>"),
        "tableHeader": ("<th>", "</th>"),
        "tableCell": ("<td>", "</td>"),
    }
    if kind == "text":
        return _adf_text(node)
    if kind in simple:
        start, end = simple[kind]
        return f"{start}{inner}{end}"
    if kind == "heading":
        level = int(attrs.get("level", 2))
        return f"<h{level}>{inner}</h{level}>"
    if kind == "table":
        return f"<table>{inner}</table>"
    if kind == "codeBlock":
        return f"<pre>{''.join(html.escape(str(c.get('text', ''))) for c in node.get('content', []))}</pre>"
    if kind == "panel":
        return f'<div class="panel {html.escape(str(attrs.get("panelType", "info")))}">{inner}</div>'
    if kind == "rule":
        return "<hr>"
    if kind == "hardBreak":
        return "<br>"
    if kind == "inlineCard":
        url = html.escape(str(attrs.get("url", "")))
        return f'<a href="{url}">🔗 {url}</a>'
    if kind == "status":
        return f'<span class="status">{html.escape(str(attrs.get("text", "")))}</span>'
    if kind == "mention":
        return f'<a href="#">@{html.escape(str(attrs.get("text", attrs.get("id", ""))))}</a>'
    if kind == "emoji":
        return html.escape(str(attrs.get("text", attrs.get("shortName", ""))))
    raise UnknownTypeError(f"ADF node {kind!r}")


def jira_issue_page(issue: dict[str, Any]) -> str:
    """A Jira Cloud issue view: breadcrumb, summary, description (ADF), comments (ADF), and a details box with the
    priority, labels and issue type from ``fields``."""
    fields = issue.get("fields", {})
    key = html.escape(str(issue.get("key", "")))
    project = html.escape(str((fields.get("project") or {}).get("key", "")))
    labels = "".join(f'<span class="tag">{html.escape(str(lb))}</span>' for lb in fields.get("labels", []))
    comments = "".join(
        f'<div class="box desc" style="margin:8px 0">{adf_html(c.get("body", c))}</div>'
        for c in issue.get("comments", [])
    )
    details = [
        ("Status", '<span class="status">To Do</span>'),
        ("Issue type", html.escape(str((fields.get("issuetype") or {}).get("name", "")))),
        ("Priority", html.escape(str((fields.get("priority") or {}).get("name", "—")))),
        ("Labels", labels or "None"),
    ]
    box = "".join(f"<div><span>{k}</span><span>{v}</span></div>" for k, v in details)
    return (
        f"<!doctype html><meta charset=utf-8><style>{_JIRA_CSS}</style>"
        f'<div class="top">Projects / {project} / {key}</div><div class="main"><div class="left">'
        f'<h1 class="summary">{html.escape(str(fields.get("summary", "")))}</h1>'
        f'<div class="lbl">Description</div><div class="desc">{adf_html(fields.get("description") or {})}</div>'
        f'<div class="lbl">Activity</div>{comments or "<p>No comments</p>"}</div>'
        f'<div class="right"><div class="box">{box}</div></div></div>'
    )


def main(argv: list[str]) -> int:
    """Render ``argv = [slack_messages.json, jira_issues.json, out_dir]``; prints the files written."""
    slack_json, jira_json, out_dir = (Path(a) for a in argv)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "slack.html").write_text(slack_page(json.loads(slack_json.read_text())), encoding="utf-8")
    print(out_dir / "slack.html")
    for issue in json.loads(jira_json.read_text()):
        path = out_dir / f"jira-{issue['key']}.html"
        path.write_text(jira_issue_page(issue), encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
