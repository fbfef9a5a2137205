"""Bounded reads of local files: a regular file only, and never more than a stated number of bytes.

A path to `/dev/zero` (or `/dev/urandom`) would be read forever, a FIFO blocks the process on `open()` until some
writer appears, and a multi-gigabyte file is held whole by `read_bytes()`. Every file a command reads (configuration,
recording, `recording.json`, `cluster.json`, `truth.json`) goes through `open_regular` or `read_capped`: the file is
opened without blocking, refused unless it is a regular file, and read no further than its limit.

Limits, each raised with an environment variable where a genuine file may be larger:

=========================  ===========  ===================================
file                       default      raise it with
=========================  ===========  ===================================
recording files, JSON       1024 MiB     GPUWASTE_RECORDING_MAX_MB
(cluster.json, truth.json,
saved API answers)
recording.json              1 MiB        (fixed: a few hundred bytes of metadata)
configuration               1 MiB        (fixed: `settings.MAX_CONFIG_BYTES`)
=========================  ===========  ===================================
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from gpuwaste.errors import ConfigError, InputFormatError

_CHUNK = 1 << 20

#: The size limit of the JSON files of a recording (cluster.json, truth.json), MiB; GPUWASTE_RECORDING_MAX_MB raises it.
DEFAULT_RECORDING_MAX_MB = 1024


#: The largest value a GPUWASTE_RECORDING_* limit may be set to.
MAX_ENV_LIMIT = 10**9


def env_positive_int(name: str, default: int) -> int:
    """The whole number 1..`MAX_ENV_LIMIT` in environment variable `name`; `default` when it is unset or empty.

    Raises:
        ConfigError: it is set to anything else (a typo is an error, never a silent default): names the variable,
            the value and what is allowed.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if len(text) > 10 or not text.isdigit() or not 0 < int(text) <= MAX_ENV_LIMIT:
        raise ConfigError(f"environment: {name}={text[:20]!r} is not a whole number from 1 to {MAX_ENV_LIMIT:,}; "
                          f"unset it for the default ({default:,})")
    return int(text)


def recording_max_bytes() -> int:
    """The size limit of a recording's files in bytes: GPUWASTE_RECORDING_MAX_MB (MiB, a positive integer), else 1024 MiB.

    Raises:
        ConfigError: GPUWASTE_RECORDING_MAX_MB is set to something else than a positive integer.
    """
    return env_positive_int("GPUWASTE_RECORDING_MAX_MB", DEFAULT_RECORDING_MAX_MB) << 20


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def open_regular(path: Path | str, *, what: str = "file") -> BinaryIO:
    """Open `path` for binary reading, refusing anything but a regular file (symlinks are followed).

    The file is opened with O_NONBLOCK, so a FIFO without a writer does not block, then checked with `fstat` on the
    open descriptor (no race between the check and the read); blocking mode is restored for a regular file.

    Raises:
        InputFormatError: the path is a FIFO, device, socket or directory ("`what` must be a regular file"), or it
            cannot be opened (the OS reason).
    """
    p = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise InputFormatError(f"cannot read {what}: {exc.strerror or exc}", source=p) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputFormatError(f"{_kind(mode)}, not a regular file: the {what} must be a regular file", source=p)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: Path | str, max_bytes: int, *, what: str = "file", hint: str = "") -> bytes:
    """The whole regular file at `path`, refused before it is read when larger than `max_bytes`.

    Args:
        max_bytes: the limit; the size is checked from `fstat` first and again while reading (a file that grows).
        what: what the file is, for messages ("configuration", "cluster.json").
        hint: how to raise the limit, appended to the message ("raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>").

    Raises:
        InputFormatError: not a regular file, cannot be read, or larger than `max_bytes`.
    """
    def too_large() -> InputFormatError:
        limit = f"{max_bytes / (1 << 20):g} MiB" if max_bytes >= 1 << 20 else f"{max_bytes:,} bytes"
        return InputFormatError(f"the {what} is larger than {limit} (the limit){'; ' + hint if hint else ''}", source=str(path))

    with open_regular(path, what=what) as fh:
        try:
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise too_large()
            parts: list[bytes] = []
            size = 0
            while True:
                chunk = fh.read(min(_CHUNK, max_bytes + 1 - size))
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise too_large()
                parts.append(chunk)
        except OSError as exc:
            raise InputFormatError(f"cannot read {what}: {exc.strerror or exc}", source=str(path)) from exc
    return b"".join(parts)


__all__ = ["DEFAULT_RECORDING_MAX_MB", "open_regular", "read_capped", "recording_max_bytes"]
