"""Models: common base class and helpers for immutable, strict domain models."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def ensure_utc(value: datetime) -> datetime:
    """Return `value` as a tz-aware UTC datetime.

    Raises:
        ValueError: if `value` is naive (no tzinfo): a naive time is ambiguous and never guessed.
    """
    if value.tzinfo is None:
        raise ValueError("datetime must be timezone-aware (UTC)")
    return value.astimezone(UTC)


class SettingsModel(BaseModel):
    """Base of every settings block: unknown keys are refused, so a typo never silently keeps a default."""

    model_config = ConfigDict(extra="forbid")
