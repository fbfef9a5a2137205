"""Models: pure pydantic v2 domain types (cluster state, telemetry windows, findings, messages)."""
