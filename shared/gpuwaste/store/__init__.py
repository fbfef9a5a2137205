"""Adapters: the finding lifecycle store — SQLite for local runs, DynamoDB for the pipeline (same contract)."""

from __future__ import annotations

from gpuwaste.store.sqlite import SqliteFindingStore

__all__ = ["SqliteFindingStore"]
