"""Allocation: the scan header's one-line account of how GPUs were handed out (pure).

"allocation: device plugin 212 GPUs, DRA 48 GPUs, HAMi 16 shares on 4 GPUs, KAI 6 fractions on 3 GPUs".
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from gpuwaste.allocation.base import AllocationResult

#: How each mechanism is named in the header, and whether its holdings are counted as shares of fewer GPUs.
LABELS: dict[str, tuple[str, str | None]] = {
    "device-plugin": ("device plugin", None),
    "mig": ("MIG", "slices"),
    "time-slicing": ("time-slicing", "replicas"),
    "mps": ("MPS", "clients"),
    "DRA": ("DRA", None),
    "HAMi": ("HAMi", "shares"),
    "KAI": ("KAI", "fractions"),
    "vGPU": ("vGPU", "guests"),
}


def allocation_header(results: Mapping[str, AllocationResult]) -> str:
    """One line naming each mechanism that holds GPUs, with GPU-equivalents or shares on distinct GPUs.

    Args:
        results: resolver name → its result (the join's merged view, in the order asked).
    """
    by_mechanism: dict[str, list] = {}
    for result in results.values():
        for h in result.holdings:
            by_mechanism.setdefault(h.mechanism, []).append(h)
    parts: list[str] = []
    for mechanism, holdings in by_mechanism.items():
        label, unit = LABELS.get(mechanism, (mechanism, None))
        total = sum((h.share for h in holdings), Decimal(0))
        gpus = {d.uuid for h in holdings for d in h.devices}
        if unit is None:
            parts.append(f"{label} {_num(total)} GPUs")
        else:
            on = f" on {len(gpus)} GPUs" if gpus else f" ({_num(total)} GPUs)"
            parts.append(f"{label} {len(holdings)} {unit}{on}")
    return "allocation: " + (", ".join(parts) if parts else "no GPU holders")


def _num(value: Decimal) -> str:
    q = value.quantize(Decimal("0.01")).normalize()
    return f"{q:f}"
