"""Checks of text as a terminal shows it: no line wider than the terminal, no identifier (pod name, GPU UUID, URL)
broken across two lines. A name shortened in the middle ("llama-70b-…-vllm") is fine; a fragment ending one line
and continued at the start of the next is not."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from pathlib import Path

#: Characters that frame a line (panel borders, table padding), not part of a word.
_FRAME = " │┃|"
_URL = re.compile(r"https?://[^\s()<>│]+")


def overlong(text: str, width: int, *, allowed: Iterable[str] = ()) -> list[str]:
    """Lines of `text` wider than `width`, except a line that is one URL alone (a terminal wraps it, clickable)
    and the lines in `allowed` (literal lines to copy, such as a CSV row)."""
    keep = {line.strip() for line in allowed}
    return [line for line in text.splitlines()
            if len(line) > width and line.strip() not in keep and not _URL.fullmatch(line.strip())]


def split_identifiers(text: str, identifiers: Iterable[str], least: int = 3) -> list[tuple[str, str, str]]:
    """(identifier, end of one line, start of the next) for every identifier whose head ends a line and whose
    rest starts the next one: the identifier was folded inside itself."""
    lines = [line.strip(_FRAME) for line in text.splitlines()]
    broken = []
    for a, b in zip(lines, lines[1:], strict=False):
        if not a.split() or not b.split():
            continue
        last, first = a.split()[-1], b.split()[0]
        for ident in identifiers:
            if ident in last:
                continue
            for k in range(least, len(ident) - 1):
                head, rest = ident[:k], ident[k:]
                if last.endswith(head) and (first.startswith(rest) or rest.startswith(first)) and len(first) >= 1:
                    broken.append((ident, last, first))
                    break
    return broken


def recording_identifiers(recording: Path) -> set[str]:
    """Pod and node names, namespace/pod and GPU UUIDs of a recording directory (cluster.json, telemetry)."""
    doc = json.loads((recording / "cluster.json").read_text())
    names: set[str] = set()
    for item in doc.get("items", []):
        meta = item.get("metadata", {})
        if item.get("kind") == "Pod":
            names |= {meta["name"], f"{meta.get('namespace')}/{meta['name']}"}
        elif item.get("kind") == "Node":
            names.add(meta["name"])
    telemetry = next(recording.glob("telemetry.om*"))
    raw = gzip.decompress(telemetry.read_bytes()) if telemetry.suffix == ".gz" else telemetry.read_bytes()
    names |= set(re.findall(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", raw.decode()))
    return {n for n in names if len(n) >= 8}


def urls(text: str) -> set[str]:
    """The URLs in `text`."""
    return set(_URL.findall(text))
