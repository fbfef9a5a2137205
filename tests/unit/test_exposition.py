"""Unit tests: Prometheus text / OpenMetrics exposition parser and writers (gpuwaste.sources.exposition)."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuwaste.errors import InputFormatError
from gpuwaste.sources.exposition import (
    ParsedExposition,
    RecordedSeries,
    parse_exposition,
    series_key,
    write_openmetrics,
    write_text_exposition,
)

if TYPE_CHECKING:
    from collections.abc import Callable

REAL_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"
SCRAPE_TS_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
T0_MS = 1_704_067_200_000
T0_S = 1_704_067_200
GPU0 = 'gpu="0",UUID="GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",device="nvidia0",Hostname="node-1"'
GPU0_LABELS = {
    "gpu": "0",
    "UUID": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
    "device": "nvidia0",
    "Hostname": "node-1",
}


def real_scrape(name: str) -> bytes:
    """Bytes of one real dcgm-exporter scrape from the shared data set; skips visibly when it is absent."""
    path = REAL_DATA / "scrapes" / name
    if not path.is_file():
        pytest.skip(f"real scrapes not available: {path} is missing (needs the shared/ checkout next to the repo)")
    return path.read_bytes()


def kinds(parsed: ParsedExposition) -> list[str]:
    return [warning.kind for warning in parsed.warnings]


def only_series(parsed: ParsedExposition) -> RecordedSeries:
    assert len(parsed.series) == 1, parsed.series
    return next(iter(parsed.series.values()))


# -- real scrapes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "series_count"),
    [
        # 23 metric families with one sample each: SM/MEM clock, MEMORY/GPU temp, POWER, ENERGY, PCIE replay,
        # GPU/MEM_COPY/ENC/DEC util, FB free/used/reserved, 3 row-remap, VGPU licence, 3 PROF ratios, PCIE tx/rx.
        ("a02-kops-aws-l4-full-scrape.prom", 23),
        ("a08-upcloud-l40s-idle-scrape.prom", 23),
        # 17 whole-GPU sample lines, a blank line, then 4 lines for MIG instance GPU_I_ID=13.
        ("a09-nvidia-docs-a100-mig-1g5gb-scrape.prom", 21),
    ],
)
def test_parse_exposition_real_scrape_yields_every_series(name: str, series_count: int) -> None:
    # GIVEN a verbatim dcgm-exporter scrape (comment header, no timestamps)
    data = real_scrape(name)

    # WHEN it is parsed as a live scrape taken at SCRAPE_TS_MS
    parsed = parse_exposition(data, source=name, default_timestamp_ms=SCRAPE_TS_MS)

    # THEN every sample line became one series with one sample at the scrape time, and only the
    # missing timestamps were reported
    assert parsed.format == "text"
    assert len(parsed.series) == series_count
    assert all(s.timestamps_ms == [SCRAPE_TS_MS] and len(s.values) == 1 for s in parsed.series.values())
    assert kinds(parsed) == ["no_timestamp"]
    assert f"{series_count} sample(s)" in parsed.warnings[0].message


def test_parse_exposition_real_scrape_keeps_types_and_values() -> None:
    # GIVEN the kOps L4 scrape with HELP/TYPE headers
    data = real_scrape("a02-kops-aws-l4-full-scrape.prom")

    # WHEN it is parsed
    parsed = parse_exposition(data, default_timestamp_ms=SCRAPE_TS_MS)

    # THEN # TYPE lines are collected and values keep their units as exposed
    assert parsed.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert parsed.types["DCGM_FI_DEV_GPU_UTIL"] == "gauge"
    power = [s for s in parsed.series.values() if s.name == "DCGM_FI_DEV_POWER_USAGE"]
    assert [s.values for s in power] == [[16.365]]
    assert power[0].labels["modelName"] == "NVIDIA L4"
    assert power[0].labels["DCGM_FI_DRIVER_VERSION"] == "580.105.08"


def test_parse_exposition_mig_scrape_yields_gpu_instance_series() -> None:
    # GIVEN NVIDIA's A100 MIG sample scrape (whole-GPU series, a blank line, then GPU-instance series)
    data = real_scrape("a09-nvidia-docs-a100-mig-1g5gb-scrape.prom")

    # WHEN it is parsed
    parsed = parse_exposition(data, default_timestamp_ms=SCRAPE_TS_MS)

    # THEN the four MIG series carry GPU_I_ID/GPU_I_PROFILE and stay distinct from the whole-GPU ones
    mig = {s.name: s for s in parsed.series.values() if "GPU_I_ID" in s.labels}
    assert sorted(mig) == [
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ]
    assert {(s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"]) for s in mig.values()} == {("13", "1g.5gb")}
    assert mig["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].values == [0.995687]
    whole = [
        s for s in parsed.series.values() if s.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and "GPU_I_ID" not in s.labels
    ]
    assert [s.values for s in whole] == [[0.99563]]


# -- formats and timestamps ------------------------------------------------------------------------------


def test_parse_exposition_text_timestamps_are_milliseconds() -> None:
    # GIVEN Prometheus text with integer-ms timestamps
    data = f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 42 {T0_MS}\nDCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 43 {T0_MS + 15_000}\n"

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN timestamps are kept as ms and values as floats
    series = only_series(parsed)
    assert parsed.format == "text"
    assert series.timestamps_ms == [T0_MS, T0_MS + 15_000]
    assert series.values == [42.0, 43.0]
    assert series.labels == GPU0_LABELS
    assert series.key == series_key("DCGM_FI_DEV_GPU_UTIL", GPU0_LABELS)


def test_parse_exposition_openmetrics_timestamps_are_seconds() -> None:
    # GIVEN OpenMetrics with integer and fractional second timestamps
    data = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 42 {T0_S}\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 43 {T0_S + 15}.5\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 44 {T0_S + 30}.125\n"
        "# EOF\n"
    )

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN the format is detected and seconds become integer ms
    assert parsed.format == "openmetrics"
    assert parsed.types == {"DCGM_FI_DEV_GPU_UTIL": "gauge"}
    assert only_series(parsed).timestamps_ms == [T0_MS, T0_MS + 15_500, T0_MS + 30_125]


@pytest.mark.parametrize(
    ("data", "fmt", "expected"),
    [
        (f"m 1 {T0_MS}\n", "auto", "text"),
        (f"m 1 {T0_S}\n# EOF\n", "auto", "openmetrics"),
        (f"m 1 {T0_S}\n# EOF", "auto", "openmetrics"),
        (f"# TYPE m_bytes gauge\n# UNIT m_bytes bytes\nm_bytes 1 {T0_S}\n# EOF\n", "auto", "openmetrics"),
        (f"# EOF is only a comment here\nm 1 {T0_MS}\n", "auto", "text"),
        (f"m 1 {T0_MS}\n# EOF\n", "text", "text"),
        (f"m 1 {T0_S}\n# EOF\n", "openmetrics", "openmetrics"),
    ],
    ids=["plain", "eof", "eof-no-newline", "unit", "eof-prefix-comment", "declared-text", "declared-om"],
)
def test_parse_exposition_detects_or_obeys_format(data: str, fmt: str, expected: str) -> None:
    # GIVEN an input and a declared (or auto) format
    # WHEN it is parsed
    parsed = parse_exposition(data, fmt=fmt)  # type: ignore[arg-type]

    # THEN it is read in the expected format and the one sample lands at T0
    assert parsed.format == expected
    assert only_series(parsed).timestamps_ms == [T0_MS]


def test_parse_exposition_empty_text_is_empty_result() -> None:
    # GIVEN an empty recording and one of blank lines and comments only
    # WHEN they are parsed as text
    empty = parse_exposition(b"")
    comments = parse_exposition("\n# HELP x y\n\n")

    # THEN both give no series and no warnings
    assert (empty.series, empty.warnings, empty.format) == ({}, [], "text")
    assert (comments.series, comments.warnings) == ({}, [])


# -- grammar ---------------------------------------------------------------------------------------------


def test_parse_exposition_unescapes_label_values() -> None:
    # GIVEN label values with the three allowed escapes
    data = 'm{path="C:\\\\dcgm",msg="say \\"hi\\"",multi="a\\nb",brace="x}y",comma="a,b"} 1 ' + str(T0_MS) + "\n"

    # WHEN it is parsed
    series = only_series(parse_exposition(data))

    # THEN the values are unescaped; braces and commas inside quotes are data
    assert series.labels == {"path": "C:\\dcgm", "msg": 'say "hi"', "multi": "a\nb", "brace": "x}y", "comma": "a,b"}


def test_parse_exposition_tolerates_blanks_and_trailing_comma() -> None:
    # GIVEN the dcgm-exporter#340 label style (space after commas), blanks around braces and a trailing comma
    spaced = (
        'DCGM_FI_DEV_GPU_TEMP{DCGM_FI_DRIVER_VERSION="545.29.06", Hostname="worker1", gpu="0", '
        'exported_pod="pod1", exported_namespace="default", pod="dcgm-exporter-dev-78z52"} 41 ' + str(T0_MS)
    )
    loose = (
        'DCGM_FI_DEV_GPU_TEMP { pod="dcgm-exporter-dev-78z52" , exported_namespace = "default",gpu="0",'
        'exported_pod="pod1",Hostname="worker1",DCGM_FI_DRIVER_VERSION="545.29.06", }\t42  '
        + str(T0_MS + 15_000)
        + "  "
    )

    # WHEN both spellings are parsed together
    parsed = parse_exposition(spaced + "\n" + loose + "\n")

    # THEN they are one series (same labels, other order), with exported_pod kept as exposed
    series = only_series(parsed)
    assert series.values == [41.0, 42.0]
    assert series.labels["exported_pod"] == "pod1"
    assert series.labels["pod"] == "dcgm-exporter-dev-78z52"
    assert len(series.labels) == 6


def test_parse_exposition_accepts_vllm_colon_names_and_bare_names() -> None:
    # GIVEN vLLM metric names with ':' and a series without labels
    data = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="meta-llama/Llama-3.1-8B"}} 0.25 {T0_MS}\n'
        f"vllm:num_requests_running 3 {T0_MS}\n"
        f"kube_pod_info{{}} 1 {T0_MS}\n"
    )

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN the names are kept verbatim
    by_name = {s.name: s for s in parsed.series.values()}
    assert by_name["vllm:kv_cache_usage_perc"].labels["model_name"] == "meta-llama/Llama-3.1-8B"
    assert by_name["vllm:num_requests_running"].labels == {}
    assert by_name["kube_pod_info"].values == [1.0]
    assert parsed.types == {"vllm:kv_cache_usage_perc": "gauge"}


def test_parse_exposition_handles_crlf_and_indented_lines() -> None:
    # GIVEN Windows line endings and an indented sample
    data = f'# TYPE m gauge\r\n  m{{a="b"}} 1 {T0_MS}\r\n'

    # WHEN it is parsed
    series = only_series(parse_exposition(data))

    # THEN the carriage returns and indentation are not data
    assert (series.labels, series.values) == ({"a": "b"}, [1.0])


def test_parse_exposition_metric_filter_skips_other_metrics() -> None:
    # GIVEN two metrics, one of them with a label set the parser would reject
    data = f'keep{{a="1"}} 1 {T0_MS}\ndrop{{a="1" b="2"}} 2 {T0_MS}\nkeep{{a="1"}} 3 {T0_MS + 1}\n'

    # WHEN only "keep" is wanted
    parsed = parse_exposition(data, metric_filter=lambda name: name == "keep")

    # THEN "drop" is skipped before its labels are parsed
    assert only_series(parsed).values == [1.0, 3.0]


def test_parse_exposition_openmetrics_exemplar_is_ignored() -> None:
    # GIVEN an OpenMetrics counter sample carrying an exemplar
    data = f'# TYPE req counter\nreq_total{{code="200"}} 7 {T0_S} # {{trace_id="abc"}} 1.0 {T0_S}\n# EOF\n'

    # WHEN it is parsed
    series = only_series(parse_exposition(data))

    # THEN only the sample is recorded
    assert (series.name, series.values, series.timestamps_ms) == ("req_total", [7.0], [T0_MS])


# -- forgiving value handling ----------------------------------------------------------------------------


def test_parse_exposition_non_finite_values_are_warned_and_dropped() -> None:
    # GIVEN NaN, +Inf, -Inf and Inf samples around one finite sample
    data = "".join(f'm{{a="b"}} {v} {T0_MS + i}\n' for i, v in enumerate(["NaN", "+Inf", "-Inf", "Inf", "7"]))

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN only the finite value is kept and each other one is reported with its line
    assert only_series(parsed).values == [7.0]
    assert [(w.line, w.kind) for w in parsed.warnings] == [(line, "non_finite") for line in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    "value",
    [
        "9223372036854775794",  # DCGM_INT64_BLANK + 2 (NOT_SUPPORTED): dcgm-exporter README sample
        "9223372036854775792",  # DCGM_INT64_BLANK
        "2147483632",  # DCGM_INT32_BLANK
        "2147483647",  # INT32_MAX, top of the int32 blank range
        "140737488355328.000000",  # DCGM_FP64_BLANK printed with %f
        "140737488355330.000000",  # DCGM_FP64_BLANK + 2
        "1.8446744073709552e+19",
    ],
)
def test_parse_exposition_dcgm_blank_sentinel_is_skipped(value: str) -> None:
    # GIVEN a DCGM blank sentinel followed by a real reading
    data = f"DCGM_FI_DEV_MEMORY_TEMP{{{GPU0}}} {value} {T0_MS}\nDCGM_FI_DEV_MEMORY_TEMP{{{GPU0}}} 61 {T0_MS + 1}\n"

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN the sentinel is skipped with a warning on its line and the reading is kept
    assert only_series(parsed).values == [61.0]
    assert [(w.line, w.kind) for w in parsed.warnings] == [(1, "skipped_sentinel")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2147483631", 2147483631.0),  # one below the int32 blank
        ("2147483648", 2147483648.0),  # above the int32 range: a real INT64 value
        ("140737488355328", 140737488355328.0),  # integer text (INT64 energy counter in mJ), not the double blank
        ("9223372036854775791", 9223372036854775791.0),  # one below the int64 blank
        ("140737488355327.500000", 140737488355327.5),  # just below the double blank
        ("2147483640.000000", 2147483640.0),  # a double inside the int32 range is not an int32 blank
    ],
)
def test_parse_exposition_values_near_sentinels_are_kept(value: str, expected: float) -> None:
    # GIVEN a large but real value
    data = f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{GPU0}}} {value} {T0_MS}\n"

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN it is kept without a warning
    assert only_series(parsed).values == [expected]
    assert parsed.warnings == []


def test_parse_exposition_non_numeric_value_is_skipped() -> None:
    # GIVEN the Kubecost-documented string field rendered as a sample, between two numeric samples
    data = (
        f"DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 5 {T0_MS}\n"
        'DCGM_FI_DEV_NAME{gpu="0",UUID="GPU-1",Hostname="myhost1.compute.internal"} Tesla T4\n'
        "DCGM_FI_DEV_BRAND NVIDIA\n"
        f"DCGM_FI_DEV_FB_USED{{{GPU0}}} 1_024 {T0_MS}\n"
        f"DCGM_FI_DEV_FB_USED{{{GPU0}}} 1024 {T0_MS}\n"
    )

    # WHEN it is parsed (no default timestamp: the skipped lines need none)
    parsed = parse_exposition(data)

    # THEN the string samples are skipped with warnings and the numeric ones kept
    assert sorted(s.name for s in parsed.series.values()) == ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"]
    assert [(w.line, w.kind) for w in parsed.warnings] == [
        (2, "skipped_non_numeric"),
        (3, "skipped_non_numeric"),
        (4, "skipped_non_numeric"),
    ]
    assert "Tesla T4" in parsed.warnings[0].message


def test_parse_exposition_invalid_utf8_label_value_is_replaced() -> None:
    # GIVEN bytes whose label value holds a byte that is not UTF-8 (Latin-1 "é")
    data = b'DCGM_FI_DEV_GPU_UTIL{pod="caf\xe9",gpu="0"} 3 ' + str(T0_MS).encode() + b"\n"
    data += b'DCGM_FI_DEV_GPU_UTIL{pod="ok",gpu="0"} 4 ' + str(T0_MS).encode() + b"\n"

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN the byte becomes U+FFFD, a warning names the line, and other lines are unaffected
    pods = {s.labels["pod"]: s.values for s in parsed.series.values()}
    assert pods == {"caf\ufffd": [3.0], "ok": [4.0]}
    assert [(w.line, w.kind) for w in parsed.warnings] == [(1, "invalid_utf8")]


@pytest.mark.parametrize(
    "line",
    [b'DCGM_FI_DEV_GPU_\xffUTIL{gpu="0"} 3 1704067200000', b'm{gpu="0"} 3\xff 1704067200000', b"# HELP m caf\xe9"],
    ids=["in-name", "in-value", "in-comment"],
)
def test_parse_exposition_invalid_utf8_outside_labels_is_an_error(line: bytes) -> None:
    # GIVEN invalid UTF-8 outside a label value on line 2
    data = b"ok 1 1704067200000\n" + line + b"\n"

    # WHEN it is parsed
    # THEN it fails on that line
    with pytest.raises(InputFormatError) as caught:
        parse_exposition(data, source="rec.prom")
    assert caught.value.line == 2
    assert "invalid UTF-8" in str(caught.value)


def test_parse_exposition_out_of_order_and_duplicate_samples_are_dropped() -> None:
    # GIVEN a series with a repeated timestamp and a sample older than its predecessor
    data = (
        f'm{{a="b"}} 1 {T0_MS}\n'
        f'm{{a="b"}} 2 {T0_MS + 15_000}\n'
        f'm{{a="b"}} 9 {T0_MS + 15_000}\n'
        f'm{{a="b"}} 8 {T0_MS + 5_000}\n'
        f'm{{a="b"}} 3 {T0_MS + 30_000}\n'
    )

    # WHEN it is parsed
    parsed = parse_exposition(data)

    # THEN the first of the duplicates is kept, the older sample dropped, as Prometheus ingests them
    series = only_series(parsed)
    assert series.timestamps_ms == [T0_MS, T0_MS + 15_000, T0_MS + 30_000]
    assert series.values == [1.0, 2.0, 3.0]
    assert [(w.line, w.kind) for w in parsed.warnings] == [(3, "duplicate_sample"), (4, "out_of_order")]


# -- strict structure ------------------------------------------------------------------------------------

OK = f'm{{a="b"}} 1 {T0_MS}\n'


@pytest.mark.parametrize(
    ("data", "fmt", "line", "reason"),
    [
        (OK + 'm{a="b} 1 ' + str(T0_MS) + "\n", "text", 2, "unterminated label value"),
        (OK + OK + 'm{a="b"}\n', "text", 3, "missing value"),
        (OK + 'm{a="b"}   \n', "text", 2, "missing value"),
        (OK + "m\n", "text", 2, "missing value"),
        (OK + f"9m 1 {T0_MS}\n", "text", 2, "invalid metric name"),
        (OK + f'my-metric{{a="b"}} 1 {T0_MS}\n', "text", 2, "invalid metric name"),
        (OK + f'{{a="b"}} 1 {T0_MS}\n', "text", 2, "no metric name"),
        (OK + f'm{{a="b" 1 {T0_MS}\n', "text", 2, "expected ',' or '}'"),
        (OK + 'm{a="b",\n', "text", 2, "'{' without matching '}'"),
        (OK + 'm{a="b",c="d"', "text", 2, "'{' without matching '}'"),
        (OK + 'm{a="b",pod="trun', "text", 2, "unterminated label value"),
        (OK + f'm{{9a="b"}} 1 {T0_MS}\n', "text", 2, "invalid label name"),
        (OK + f'm{{a:b="c"}} 1 {T0_MS}\n', "text", 2, "expected '='"),
        (OK + f"m{{a=b}} 1 {T0_MS}\n", "text", 2, "expected '\"'"),
        (OK + f'm{{a="1",a="2"}} 1 {T0_MS}\n', "text", 2, "duplicate label name 'a'"),
        (OK + 'm{a="b"} 1 17040672OO\n', "text", 2, "invalid timestamp"),
        (OK + f'm{{a="b"}} 1 {T0_MS} extra\n', "text", 2, "unexpected text after the timestamp"),
        (OK + f'm{{a="b"}} 1 {T0_S}\n', "text", 2, "looks like seconds"),
        (OK + f'm{{a="b"}} 1 {T0_S}.5\n', "text", 2, "invalid timestamp"),
        (f'm{{a="b"}} 1 {T0_S}\nm{{a="b"}} 2 {T0_MS}\n# EOF\n', "auto", 2, "looks like milliseconds"),
        (OK + 'm{a="b"} 1\n', "text", 2, "no timestamp"),
        (f'm{{a="b"}} 1 {T0_S}\n# EOF\n\n', "auto", 3, "unexpected data after # EOF"),
        (f'm{{a="b"}} 1 {T0_S}\n# EOF\nm{{a="b"}} 2 {T0_S + 1}\n', "openmetrics", 3, "unexpected data after # EOF"),
        (f'm{{a="b"}} 1 {T0_S}\nm{{a="b"}} 2 {T0_S + 1}\n', "openmetrics", 2, "does not end with # EOF"),
        ("", "openmetrics", 1, "does not end with # EOF"),
        (f"# UNIT m_bytes bytes\nm_bytes 1 {T0_S}\n", "auto", 2, "does not end with # EOF"),
        (f'm{{a="b"}} 1 {T0_S}\nm{{a="b",c="', "openmetrics", 2, "unterminated label value"),
    ],
    ids=[
        "unterminated-quote",
        "missing-value",
        "missing-value-blanks",
        "missing-value-bare",
        "name-starts-with-digit",
        "name-with-dash",
        "no-name",
        "missing-comma",
        "brace-not-closed",
        "truncated-after-value",
        "truncated-mid-label",
        "bad-label-name",
        "colon-in-label-name",
        "unquoted-label-value",
        "duplicate-label",
        "garbage-timestamp",
        "extra-token",
        "seconds-in-text",
        "float-seconds-in-text",
        "ms-in-openmetrics",
        "no-timestamp-no-default",
        "blank-after-eof",
        "data-after-eof",
        "openmetrics-without-eof",
        "empty-openmetrics",
        "unit-without-eof",
        "truncated-openmetrics",
    ],
)
def test_parse_exposition_broken_structure_raises_with_line(data: str, fmt: str, line: int, reason: str) -> None:
    # GIVEN a recording that is structurally broken on a known line
    # WHEN it is parsed
    # THEN an InputFormatError names the source, the 1-based line and the reason
    with pytest.raises(InputFormatError) as caught:
        parse_exposition(data, fmt=fmt, source="recording.prom")  # type: ignore[arg-type]
    assert caught.value.line == line
    assert caught.value.source == "recording.prom"
    assert str(caught.value).startswith(f"recording.prom:{line}: ")
    assert reason in str(caught.value)


# -- writers ---------------------------------------------------------------------------------------------


def sample_series() -> list[RecordedSeries]:
    """Two families, interleaved on input, with an escaped label, a fractional-second timestamp and
    samples out of order."""
    return [
        RecordedSeries("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "pod": 'a"b\\c'}, [T0_MS + 15_500, T0_MS], [7.0, 0.0]),
        RecordedSeries("vllm:kv_cache_usage_perc", {"engine": "0"}, [T0_MS], [0.125]),
        RecordedSeries("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", "pod": "x\ny"}, [T0_MS], [100.0]),
        RecordedSeries("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {"gpu": "0"}, [T0_MS], [5551899580.0]),
    ]


def test_write_openmetrics_writes_promtool_shape() -> None:
    # GIVEN series of two families given interleaved, one with unsorted samples
    out = io.StringIO()

    # WHEN they are written as OpenMetrics
    types = {"DCGM_FI_DEV_GPU_UTIL": "gauge", "vllm:kv_cache_usage_perc": "histogram"}
    write_openmetrics(sample_series(), out, types=types)

    # THEN each family is contiguous under one # TYPE, samples are in time order with second timestamps,
    # values are exact, and # EOF ends the output
    assert out.getvalue() == (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",pod="a\\"b\\\\c"}} 0 {T0_S}\n'
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",pod="a\\"b\\\\c"}} 7 {T0_S + 15}.5\n'
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",pod="x\\ny"}} 100 {T0_S}\n'
        "# TYPE vllm:kv_cache_usage_perc unknown\n"
        f'vllm:kv_cache_usage_perc{{engine="0"}} 0.125 {T0_S}\n'
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n"
        f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0"}} 5551899580 {T0_S}\n'
        "# EOF\n"
    )


def test_write_text_exposition_writes_millisecond_timestamps() -> None:
    # GIVEN one series
    series = [RecordedSeries("m", {"a": "b"}, [T0_MS + 1, T0_MS], [0.1, 2.0])]
    out = io.StringIO()

    # WHEN it is written in the text format
    write_text_exposition(series, out, types={"m": "unknown"})

    # THEN timestamps are integer ms in order and the OpenMetrics-only type becomes untyped
    assert out.getvalue() == f'# TYPE m untyped\nm{{a="b"}} 2 {T0_MS}\nm{{a="b"}} 0.1 {T0_MS + 1}\n'


def test_write_openmetrics_rejects_invalid_names() -> None:
    # GIVEN a series whose label name is not valid in the exposition formats
    series = [RecordedSeries("m", {"bad-label": "x"}, [T0_MS], [1.0])]

    # WHEN it is written
    # THEN the writer refuses instead of producing an unparsable file
    with pytest.raises(ValueError, match="invalid label name"):
        write_openmetrics(series, io.StringIO())


@pytest.mark.parametrize("writer", [write_openmetrics, write_text_exposition], ids=["openmetrics", "text"])
def test_write_then_parse_round_trips(writer: Callable[..., None]) -> None:
    # GIVEN series with awkward values: tiny, huge-but-real, fractional, negative, DCGM-range doubles
    series = sample_series() + [
        RecordedSeries(
            "odd",
            {"k": "v"},
            [T0_MS + i for i in range(7)],
            [1e-300, 0.1 + 0.2, -3.5, 140737488355328.0, 2147483640.0, 123456789012345678.0, 1.25e8],
        )
    ]
    out = io.StringIO()

    # WHEN they are written and parsed back
    writer(series, out)
    parsed = parse_exposition(out.getvalue())

    # THEN the same series come back with sorted samples and exact values, without warnings
    expected = {}
    for one in series:
        order = sorted(range(len(one.timestamps_ms)), key=one.timestamps_ms.__getitem__)
        expected[one.key] = RecordedSeries(
            one.name, one.labels, [one.timestamps_ms[i] for i in order], [one.values[i] for i in order]
        )
    assert parsed.series == expected
    assert parsed.warnings == []


def test_write_openmetrics_output_round_trips_real_scrape() -> None:
    # GIVEN a real scrape parsed at a fixed time
    data = real_scrape("a09-nvidia-docs-a100-mig-1g5gb-scrape.prom")
    parsed = parse_exposition(data, default_timestamp_ms=SCRAPE_TS_MS)
    out = io.StringIO()

    # WHEN it is written as OpenMetrics and parsed again with auto-detection
    write_openmetrics(parsed.series.values(), out, types=parsed.types)
    again = parse_exposition(out.getvalue())

    # THEN the series are identical
    assert again.format == "openmetrics"
    assert again.series == parsed.series


def test_write_openmetrics_output_is_accepted_by_promtool(tmp_path: Path) -> None:
    # GIVEN the real promtool and three scrapes of the kOps L4 exporter, 15.5 s apart, plus odd series
    promtool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install --no-install-recommends prometheus)")
    data = real_scrape("a02-kops-aws-l4-full-scrape.prom")
    merged: dict[object, RecordedSeries] = {}
    types: dict[str, str] = {}
    for step in range(3):
        parsed = parse_exposition(data, default_timestamp_ms=T0_MS + 15_500 * step)
        types.update(parsed.types)
        for key, one in parsed.series.items():
            target = merged.setdefault(key, RecordedSeries(one.name, dict(one.labels)))
            target.timestamps_ms += one.timestamps_ms
            target.values += one.values
    series = list(merged.values()) + sample_series()
    expected_samples = sum(len(one.values) for one in series)
    recording = tmp_path / "dcgm.om"
    with recording.open("w", encoding="utf-8") as handle:
        write_openmetrics(series, handle, types=types)

    # WHEN promtool backfills TSDB blocks from it
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(recording), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # THEN it succeeds and the block table counts every sample (column NUM SAMPLES)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line[:1].isalnum() and not line.startswith("BLOCK")]
    assert sum(int(row[4]) for row in rows) == expected_samples
