"""Detectors: the registry — each detector is a pure function registered by name with its signals and settings."""

from __future__ import annotations

import importlib
import pkgutil
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from gpuwaste.detectors.episodes import complete
from gpuwaste.detectors.money import assign_money_owners
from gpuwaste.join import ScanContext, SubjectKey
from gpuwaste.models.findings import Episode, Finding


@dataclass(frozen=True)
class NoVerdict:
    """A detector looked at a subject and declined to judge it (not enough data, too young...)."""

    detector: str
    subject: str
    reason: str


@dataclass(frozen=True)
class Superseded:
    """A finding a detector did not build because a finding already reported supersedes it (`ScanContext.superseded_now`).

    It still takes part in supersession as the finding would have (it may supersede others), and is never reported.

    Attributes:
        detector: the detector that would have reported it. key: its subject key (`SubjectKey`).
        episodes: the episodes it would have had (after `episodes.complete`).
    """

    detector: str
    key: SubjectKey
    episodes: tuple[Episode, ...]


DetectorOutput = Iterable[Finding | NoVerdict | Superseded]
DetectorFn = Callable[[ScanContext, Any], DetectorOutput]


@dataclass(frozen=True)
class DetectorSpec:
    """A registered detector.

    Attributes:
        name: the waste kind it reports (also its settings key).
        needs: metric names it reads; any one of `needs_any` suffices.
        optional: metric names that sharpen its verdict when present.
        superseded_by: detectors whose finding on the same subject replaces this one's
            (an idle pod is not also reported as under-used).
    """

    name: str
    fn: DetectorFn
    settings_model: type[BaseModel]
    needs_any: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    description: str = ""

    def summary(self) -> str:
        """What the detector reports, for people: the first paragraph of its docstring on one line, without the
        field guide's internal codes ("(B14, B15)")."""
        paragraph = (self.fn.__doc__ or self.description).strip().split("\n\n")[0]
        return _CODES.sub("", " ".join(line.strip() for line in paragraph.splitlines()))


#: the field guide's internal codes in detector docstrings: "(B14)", "(B14, B15)", ", B15"
_CODES = re.compile(r"\s*\((?:B\d\d(?:,\s*)?)+\)|,\s*B\d\d\b")

REGISTRY: dict[str, DetectorSpec] = {}


def detector(
    name: str,
    *,
    settings: type[BaseModel],
    needs_any: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
    superseded_by: tuple[str, ...] = (),
    description: str = "",
) -> Callable[[DetectorFn], DetectorFn]:
    """Register `fn` as detector `name` (decorator)."""

    def wrap(fn: DetectorFn) -> DetectorFn:
        REGISTRY[name] = DetectorSpec(name, fn, settings, needs_any, optional, superseded_by, description or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return wrap


#: modules of the package that hold no detector (discovery skips them; importing them would be harmless but pointless)
_NOT_DETECTORS = frozenset({"registry", "settings", "episodes", "money", "readings", "context"})


def discover() -> list[str]:
    """Import every detector module of `gpuwaste.detectors` (each registers itself with `@detector`); return the
    module names imported. A new detector is a new module in the package: nothing lists it by hand.

    Raises:
        ImportError: a detector module fails to import (the error names it).
    """
    package = importlib.import_module("gpuwaste.detectors")
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_") and m.name not in _NOT_DETECTORS)
    for name in names:
        importlib.import_module(f"gpuwaste.detectors.{name}")
    return names


class RegistryError(TypeError):
    """The detector registry contradicts itself or its settings document (a programming error, raised at import)."""


def check_registry(settings_fields: dict[str, type[BaseModel]], registry: dict[str, DetectorSpec] | None = None) -> None:
    """Check the registry when the detectors are imported: every `superseded_by` names a registered detector other
    than itself, and the settings document (`DetectorSettings`: field name → model) has exactly one field per
    registered detector, of that detector's settings model.

    Raises:
        RegistryError: naming the detector, the bad name and what to fix.
    """
    registry = REGISTRY if registry is None else registry
    problems: list[str] = []
    for name, spec in registry.items():
        unknown = [s for s in spec.superseded_by if s not in registry or s == name]
        if unknown:
            problems.append(f"{name}: superseded_by names {unknown}, not another registered detector "
                            f"(registered: {sorted(registry)})")
        model = settings_fields.get(name)
        if model is None:
            problems.append(f"{name}: no field in the settings document (detectors/settings.py builds it from the "
                            f"registry: `{name}: {spec.settings_model.__name__}`); was the module imported?")
        elif model is not spec.settings_model:
            problems.append(f"{name}: DetectorSettings.{name} is {model.__name__}, the detector reads {spec.settings_model.__name__}")
    extra = sorted(set(settings_fields) - set(registry))
    if extra:
        problems.append(f"DetectorSettings has fields for no registered detector: {extra}")
    if problems:
        raise RegistryError("detector registry: " + "; ".join(problems))


def registry_table(registry: dict[str, DetectorSpec] | None = None) -> str:
    """The registered detectors as the Markdown table of docs/catalogue.md (name, what it reports, the signals it
    reads, what supersedes it, its settings), in name order."""
    registry = REGISTRY if registry is None else registry

    def names(items: Iterable[str]) -> str:
        return ", ".join(f"`{i}`" for i in items) or "—"

    rows = ["| detector | reports | reads (any of) | superseded by | settings |", "|---|---|---|---|---|"]
    for name in sorted(registry):
        spec = registry[name]
        what = spec.summary().replace("|", "\\|")
        rows.append(f"| `{name}` | {what} | {names(spec.needs_any)} | {names(spec.superseded_by)} | "
                    f"{names(spec.settings_model.model_fields)} |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class DetectionResult:
    """Findings of one scan and the subjects that got no verdict."""

    findings: tuple[Finding, ...]
    no_verdict: tuple[NoVerdict, ...]


def run_detectors(ctx: ScanContext, settings_by_name: dict[str, BaseModel], enabled: Iterable[str] | None = None) -> DetectionResult:
    """Run the enabled detectors over one scan context, resolve supersession, and price each GPU-hour once
    (`money.assign_money_owners`): findings sharing GPU-hours point to the one that owns their money.

    Raises:
        KeyError: if `enabled` names a detector that is not registered.
    """
    names = list(enabled) if enabled is not None else list(REGISTRY)
    findings: list[Finding] = []
    skipped: list[NoVerdict] = []
    present: dict[SubjectKey, list[Finding | Superseded]] = {}
    index = _Presence()

    def superseded_now(detector: str, key: SubjectKey, episodes: tuple[Episode, ...]) -> bool:
        spec = REGISTRY.get(detector)
        return spec is not None and index.covers(key, spec.superseded_by, episodes)

    before, ctx.superseded_now = ctx.superseded_now, superseded_now
    try:
        for name in names:
            spec = REGISTRY[name]
            for item in spec.fn(ctx, settings_by_name.get(name) or spec.settings_model()):
                if isinstance(item, NoVerdict):
                    skipped.append(item)
                elif isinstance(item, Superseded):
                    present.setdefault(item.key, []).append(item)
                    index.add(item.key, item.detector, item.episodes)
                else:
                    f = complete(ctx, item)
                    findings.append(f)
                    present.setdefault(subject_key(f), []).append(f)
                    index.add(subject_key(f), f.detector, f.episodes)
    finally:
        ctx.superseded_now = before
    return DetectionResult(tuple(assign_money_owners(_supersede(findings, present))), tuple(skipped))


def subject_key(f: Finding) -> SubjectKey:
    """The subject of a finding as supersession compares it (`join.view.SubjectKey`)."""
    s = f.subject
    return (s.namespace, s.pod, s.node if s.pod is None else None)


def _supersede(findings: list[Finding], present: dict[SubjectKey, list[Finding | Superseded]]) -> list[Finding]:
    """Drop a finding when a finding of a detector that supersedes it covers the same subject at the same time
    (an idle hour before a stall that started later stays its own finding). `present`: every finding and every
    `Superseded` placeholder by subject key (placeholders supersede as the findings they stand for would have).

    O(n log n) in the findings (`_Presence`), whatever number of them share a subject key (20,000 GPUs whose Hostname
    matches no node share one); the same output as comparing every pair (bench/supersede.py checks it).
    """
    index = _Presence()
    for key, items in present.items():
        for o in items:
            index.add(key, o.detector, o.episodes)
    out = []
    for f in findings:
        spec = REGISTRY.get(f.detector)
        if spec and index.covers(subject_key(f), spec.superseded_by, f.episodes):
            continue
        out.append(f)
    return out


class _Presence:
    """Findings and `Superseded` placeholders by (subject key, detector), answering "does a finding of one of these
    detectors at this subject share time with these episodes?" (`_overlap` against each of them) in O(log n).

    Per (key, detector): whether any entry has no episodes (it covers the whole window), and its episodes sorted by
    start with the running maximum of their ends — episode x shares time with one of them iff, among those starting
    before x.end, the latest end is after x.start (the strict comparisons of `_overlap`). Built lazily, rebuilt after an add.
    """

    def __init__(self) -> None:
        self._episodes: dict[tuple[SubjectKey, str], list[tuple[Episode, ...]]] = {}
        self._built: dict[tuple[SubjectKey, str], tuple[bool, list[datetime], list[datetime]]] = {}

    def add(self, key: SubjectKey, detector: str, episodes: tuple[Episode, ...]) -> None:
        """Note one finding (or placeholder) of `detector` at `key` covering `episodes`."""
        k = (key, detector)
        self._episodes.setdefault(k, []).append(episodes)
        self._built.pop(k, None)

    def _index(self, k: tuple[SubjectKey, str]) -> tuple[bool, list[datetime], list[datetime]]:
        built = self._built.get(k)
        if built is None:
            entries = self._episodes[k]
            whole = any(not e for e in entries)
            spans = sorted(((ep.start, ep.end) for e in entries for ep in e), key=lambda s: s[0])
            starts = [s for s, _ in spans]
            latest: list[datetime] = []
            for _, end in spans:
                latest.append(end if not latest or end > latest[-1] else latest[-1])
            built = self._built[k] = (whole, starts, latest)
        return built

    def covers(self, key: SubjectKey, detectors: Iterable[str], episodes: tuple[Episode, ...]) -> bool:
        """True when an entry of one of `detectors` at `key` shares time with `episodes` (as `_overlap` says)."""
        for detector in detectors:
            k = (key, detector)
            if k not in self._episodes:
                continue
            if not episodes:
                return True
            whole, starts, latest = self._index(k)
            if whole:
                return True
            for x in episodes:
                i = bisect_left(starts, x.end)  # entries starting before x ends
                if i and latest[i - 1] > x.start:
                    return True
        return False


def _overlap(a: tuple[Episode, ...], b: tuple[Episode, ...]) -> bool:
    """True when two findings' episodes share time (a finding without episodes covers the whole window)."""
    if not a or not b:
        return True
    return any(x.start < y.end and y.start < x.end for x in a for y in b)
