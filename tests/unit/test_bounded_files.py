"""Bounded file reads (`gpuwaste.files`) and the configuration's refusals: a FIFO or a device is refused without
blocking or reading, a file over its cap is refused before it is read, a repeated key is refused with its path, and an
over-long integer is refused before conversion."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuwaste.config import load_config, parse_config
from gpuwaste.errors import ConfigError, InputFormatError
from gpuwaste.files import open_regular, read_capped, recording_max_bytes


def _within(seconds: float, fn, *args):  # type: ignore[no-untyped-def]
    """Run fn(*args) in a thread; its result or exception, or fail when it blocks past `seconds`."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    # GIVEN a FIFO nobody writes to (open() for reading would block forever)
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    # WHEN it is opened / THEN refused at once, naming what it is
    with pytest.raises(InputFormatError, match="a FIFO .*must be a regular file"):
        _within(5, open_regular, fifo)


def test_a_device_is_refused_before_reading(tmp_path: Path) -> None:
    # GIVEN /dev/zero (endless) / WHEN read with a cap / THEN refused as a character device, nothing read
    with pytest.raises(InputFormatError, match="a character device"):
        _within(5, read_capped, Path("/dev/zero"), 1 << 20)
    # AND a directory is refused the same way
    with pytest.raises(InputFormatError, match="a directory"):
        read_capped(tmp_path, 1 << 20)


def test_a_file_over_its_cap_is_refused_from_its_size_and_under_it_is_read_whole(tmp_path: Path) -> None:
    # GIVEN a 3 GB sparse file and a small one
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    with big.open("wb") as fh:
        fh.truncate(3 << 30)
    small.write_bytes(b"x" * 1000)
    # WHEN read with a 1 MiB cap / THEN the big one is refused naming the cap and the hint, the small one read whole
    with pytest.raises(InputFormatError, match=r"larger than 1 MiB \(the limit\); raise it"):
        read_capped(big, 1 << 20, hint="raise it")
    assert read_capped(small, 1000) == b"x" * 1000
    with pytest.raises(InputFormatError, match="larger than 999 bytes"):
        read_capped(small, 999)


def test_recording_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWASTE_RECORDING_MAX_MB", "8")
    assert recording_max_bytes() == 8 << 20
    monkeypatch.setenv("GPUWASTE_RECORDING_MAX_MB", "")
    assert recording_max_bytes() == 1024 << 20
    # a bad value is an error naming the variable, never a silent default
    for bad in ("0", "-3", "lots", "9" * 5000):
        monkeypatch.setenv("GPUWASTE_RECORDING_MAX_MB", bad)
        with pytest.raises(ConfigError, match="GPUWASTE_RECORDING_MAX_MB=.* is not a whole number from 1 to"):
            recording_max_bytes()


def test_recording_limits_refuse_a_bad_environment_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwaste.sources.limits import RecordingLimits

    monkeypatch.setenv("GPUWASTE_RECORDING_MAX_LINE_KB", "64")
    assert RecordingLimits.from_env().max_line_bytes == 64 << 10
    monkeypatch.setenv("GPUWASTE_RECORDING_MAX_SERIES", "2e6")
    with pytest.raises(ConfigError, match="GPUWASTE_RECORDING_MAX_SERIES='2e6'"):
        RecordingLimits.from_env()


def test_config_path_to_a_device_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="/dev/zero: a character device"):
        _within(5, load_config, Path("/dev/zero"))


@pytest.mark.parametrize(("doc", "message"), [
    ("scan:\n  window_s: 3600\n  window_s: 7200\n", "cfg: scan.window_s: duplicate key (lines 2 and 3); keep one"),
    ('{"delivery": {"slack": {"timeout_s": 5}, "slack": {"timeout_s": 6}}}', "cfg: delivery.slack: duplicate key (lines 1 and 1)"),
    ("clusters:\n- name: a\n  name: b\n", "cfg: clusters[0].name: duplicate key (lines 2 and 3)"),
    ("scan:\n  window_s: " + "9" * 5000 + "\n", "cfg: line 2: an integer of 5,000 digits is out of range"),
    ("scan:\n  window_s: -" + "1" * 41 + "\n", "an integer of 41 digits is out of range"),
])
def test_config_refuses_repeated_keys_and_over_long_integers(doc: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, source="cfg")
    assert message in str(caught.value)


def test_config_merge_keys_and_aliases_are_not_duplicates() -> None:
    # GIVEN a YAML anchor reused twice and a merge key (`<<`) whose keys the mapping overrides
    doc = "base: &b {window_s: 3600}\nscan:\n  <<: *b\n  window_s: 7200\n"
    # WHEN parsed / THEN not refused as a duplicate (the failure, if any, is the unknown top-level key `base`)
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, source="cfg")
    assert "duplicate" not in str(caught.value) and "base" in str(caught.value)
