"""Adapter helper: limits on what a recording may hold, so a hostile or broken file ends in a clear error instead of
exhausting memory or hanging.

A 2.4 MB gzip file can decompress to gigabytes; a gzip of NUL bytes is no text exposition at all; one endless line
keeps the parser busy. The limits (each with the environment variable that raises it):

=========================  ===========  ===================================
limit                      default      raise it with
=========================  ===========  ===================================
decompressed size          1024 MiB     GPUWASTE_RECORDING_MAX_MB
line length                1024 KiB     GPUWASTE_RECORDING_MAX_LINE_KB
series (after parsing)     2,000,000    GPUWASTE_RECORDING_MAX_SERIES
NUL bytes                  none allowed (a text exposition never holds one)
=========================  ===========  ===================================
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

from gpuwaste.errors import InputFormatError
from gpuwaste.files import env_positive_int, open_regular

_CHUNK = 1 << 20


@dataclass(frozen=True)
class RecordingLimits:
    """Limits on a recording's telemetry file (see the module docstring)."""

    max_bytes: int = 1024 << 20
    max_line_bytes: int = 1024 << 10
    max_series: int = 2_000_000

    @classmethod
    def from_env(cls) -> RecordingLimits:
        """The defaults, raised (or lowered) by the GPUWASTE_RECORDING_* environment variables.

        Raises:
            ConfigError: one of them is set to something else than a positive integer (never a silent default).
        """
        return cls(max_bytes=env_positive_int("GPUWASTE_RECORDING_MAX_MB", 1024) << 20,
                   max_line_bytes=env_positive_int("GPUWASTE_RECORDING_MAX_LINE_KB", 1024) << 10,
                   max_series=env_positive_int("GPUWASTE_RECORDING_MAX_SERIES", 2_000_000))


def read_recording(path: Path, limits: RecordingLimits) -> bytes:
    """The file's bytes (gunzipped when it is gzip), read no further than `limits.max_bytes`.

    Raises:
        InputFormatError: unreadable, corrupt gzip, larger than the limit (naming it and how to raise it), holding NUL
            bytes, or a line longer than the limit (not checked for a saved Prometheus API answer, JSON on one line).
    """
    try:
        with open_regular(path, what="recording") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if gz else raw
            parts: list[bytes] = []
            size = 0
            api_json: bool | None = None  # a saved API answer is one JSON line: no line limit
            since_newline = 0
            while True:
                chunk = stream.read(_CHUNK)
                if not chunk:
                    break
                if api_json is None and chunk.strip():
                    api_json = chunk.lstrip()[:1] in (b"{", b"[")
                if not api_json:  # an endless line stops here, not at the size limit (the rest: check_lines)
                    last = chunk.rfind(b"\n")
                    since_newline = since_newline + len(chunk) if last < 0 else len(chunk) - last - 1
                    if since_newline > limits.max_line_bytes:
                        raise InputFormatError(
                            f"a line longer than {limits.max_line_bytes >> 10} KiB (the limit); if genuine, raise it with "
                            "GPUWASTE_RECORDING_MAX_LINE_KB=<KiB>", source=str(path), line=data_lines(parts, chunk))
                nul = chunk.find(b"\x00")
                if nul >= 0:
                    raise InputFormatError(f"NUL byte at offset {size + nul}: not a text exposition "
                                           "(a binary or corrupt file)", source=str(path))
                size += len(chunk)
                if size > limits.max_bytes:
                    raise InputFormatError(
                        f"{'decompresses' if gz else 'grows'} to more than {limits.max_bytes >> 20} MiB (the limit); "
                        "if the recording is genuine, raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>", source=str(path))
                parts.append(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error):
            raise InputFormatError(f"corrupt gzip file: {exc}", source=str(path)) from exc
        raise InputFormatError(f"cannot read recording: {getattr(exc, 'strerror', None) or exc}", source=str(path)) from exc
    data = b"".join(parts)
    if data.lstrip()[:1] not in (b"{", b"["):  # a saved Prometheus API answer is JSON on one line: size-limited only
        check_lines(data, limits, source=str(path))
    return data


def data_lines(parts: list[bytes], chunk: bytes) -> int:
    """The 1-based number of the line that `chunk` ends in, after `parts`."""
    return sum(p.count(b"\n") for p in parts) + chunk.count(b"\n") + 1


def check_lines(data: bytes, limits: RecordingLimits, *, source: str) -> None:
    """Refuse a line longer than the limit (checked in windows, at C speed: no line split).

    Raises:
        InputFormatError: naming the limit and how to raise it.
    """
    window = limits.max_line_bytes + 1
    stride = max(1, window // 2)
    for start in range(0, max(0, len(data) - window + 1), stride):
        if data.find(b"\n", start, start + window) < 0:
            line = data.count(b"\n", 0, start) + 1
            raise InputFormatError(
                f"a line longer than {limits.max_line_bytes >> 10} KiB (the limit); if genuine, raise it with "
                "GPUWASTE_RECORDING_MAX_LINE_KB=<KiB>", source=source, line=line)


def check_series(count: int, limits: RecordingLimits, *, source: str) -> None:
    """Refuse a recording with more series than the limit.

    Raises:
        InputFormatError: naming the limit and how to raise it.
    """
    if count > limits.max_series:
        raise InputFormatError(f"{count:,} series, more than the limit of {limits.max_series:,}; if genuine, raise it "
                               "with GPUWASTE_RECORDING_MAX_SERIES=<n>", source=source)


__all__ = ["RecordingLimits", "check_lines", "check_series", "read_recording"]
