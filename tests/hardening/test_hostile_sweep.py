"""Hostile-input sweep: the CLI run as a subprocess against hostile Prometheus answers (a local raw-socket server),
hostile files and hostile configurations. Each case must end with its documented exit code (docs/cli.md: 2 for bad
input, 3 for a source's unusable answer), one `error:` line and no traceback, within its deadline, and below 1 GB of
resident memory (the child's own peak RSS, from `os.wait4`).

Caps and deadlines are set small (a 16 MB answer cap, a 2 s answer deadline, 64 KiB lines) so each case takes
seconds; the hostile inputs are far larger than the caps (300 MB answers, a 2 GB gzip bomb, 3 GB sparse files,
/dev/zero) so an unbounded read shows as memory, not as a slow test. The child also runs under a 6 GB address-space
limit so a regression fails as a MemoryError traceback instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.bootstrap import local
from tests.servers.hostile_http import HostileHttpServer

ROOT = Path(__file__).resolve().parents[2]
MAX_RSS_MB = 1024
AS_LIMIT = 6 << 30
ANSWER_CAP_MB = 16
DEADLINE_S = 2.0
AT = "2026-01-01T00:00:00Z"


@dataclass
class Run:
    rc: int
    out: str
    err: str
    wall_s: float
    max_rss_mb: float


#: Runs the CLI as its own child and reports that child's peak RSS. A child forked straight from pytest would count
#: pytest's own resident pages (the kernel keeps the larger of the pre-exec and post-exec peaks in ru_maxrss, and
#: pytest is hundreds of MB late in `make test`); forked from this small launcher, the pre-exec part is the
#: launcher's few MB.
LAUNCHER = """
import os, resource, sys
limit = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(sys.executable, [sys.executable, "-c", "from gpuwaste.cli import run; run()", *sys.argv[3:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[2], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _cli(args: list[str], *, env: dict[str, str] | None = None, kill_after_s: float = 60.0) -> Run:
    """Run `gpuwaste ARGS` (the console-script entry point, `gpuwaste.cli:run`) in a child under an address-space
    limit; its exit code, output, wall time and its own peak RSS."""
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}", "COLUMNS": "200", **(env or {})}
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_f:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(AS_LIMIT), rss_f.name, *args], stdout=out_f,
                                stderr=err_f, stdin=subprocess.DEVNULL, env=full_env, cwd=ROOT, start_new_session=True)
        killer = threading.Timer(kill_after_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
        killer.start()
        try:
            rc = proc.wait()
        finally:
            killer.cancel()
        wall = time.monotonic() - t0
        out_f.seek(0)
        err_f.seek(0)
        maxrss_kb = int(rss_f.read() or 0)
        return Run(rc, out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace"), wall,
                   maxrss_kb / 1024)


_MEASURED: list[tuple[str, Run]] = []


def _record(figures: Any, case: str, run: Run) -> None:
    """Note the case's figures (printed with the hardening figures, and per case with `pytest -s`)."""
    _MEASURED.append((case, run))
    print(f"sweep {case}: exit {run.rc}, {run.wall_s:.1f} s, max RSS {run.max_rss_mb:.0f} MB")
    worst_rss = max(_MEASURED, key=lambda m: m[1].max_rss_mb)
    slowest = max(_MEASURED, key=lambda m: m[1].wall_s)
    figures.notes["hostile sweep"] = (f"{len(_MEASURED)} cases; max RSS {worst_rss[1].max_rss_mb:.0f} MB ({worst_rss[0]}); "
                                      f"slowest {slowest[1].wall_s:.1f} s ({slowest[0]})")


def _check(run: Run, *, code: int, says: str, within_s: float) -> None:
    text = run.out + run.err
    assert "Traceback" not in text and "MemoryError" not in text, text[-2000:]
    assert run.rc == code, (run.rc, text[-2000:])
    assert "error:" in run.err and says.lower() in text.lower(), text[-2000:]
    assert run.wall_s < within_s, (run.wall_s, text[-500:])
    assert run.max_rss_mb < MAX_RSS_MB, run.max_rss_mb


def _config(path: Path, url: str) -> Path:
    path.write_text(json.dumps({"clusters": [{"name": "c", "cluster_state": "kube-state-metrics", "prometheus": {
        "url": url, "max_answer_mb": ANSWER_CAP_MB, "answer_deadline_s": DEADLINE_S, "timeout_s": 5, "max_retries": 0}}]}))
    return path


ANSWERS = [
    pytest.param("huge", {"size": 300_000_000}, f"answer over {ANSWER_CAP_MB} MB (received)", id="huge-300MB"),
    pytest.param("gzip_bomb", {"size": 2_000_000_000}, f"answer over {ANSWER_CAP_MB} MB (decoded", id="gzip-bomb-2GB"),
    pytest.param("slow_drip", {"drip_s": 0.5}, f"within {DEADLINE_S:g} s", id="slow-drip"),
    pytest.param("header_drip", {"drip_s": 0.5}, f"within {DEADLINE_S:g} s", id="header-drip"),
    pytest.param("malformed", {}, "did not answer like a Prometheus HTTP API", id="malformed"),
    pytest.param("status", {"status": 401}, "rejected the credentials (HTTP 401)", id="401"),
    pytest.param("status", {"status": 302}, "redirected", id="302"),
    pytest.param("status", {"status": 422}, "refused the", id="422"),
    pytest.param("status", {"status": 503}, "answered HTTP 503", id="503"),
]


@pytest.mark.parametrize(("kind", "options", "says"), ANSWERS)
def test_hostile_prometheus_answer_is_one_line_exit_3_bounded(kind: str, options: dict[str, Any], says: str, tmp_path: Path,
                                                              figures: Any) -> None:
    # GIVEN a Prometheus that answers every request with this trouble, and a config with small caps
    with HostileHttpServer(kind, **options) as server:
        config = _config(tmp_path / "config.json", server.url)
        # WHEN a live scan runs against it
        run = _cli(["scan", "--config", str(config), "--at", AT, "-q"])
        seen = server.requests_seen
    # THEN it asked (counted at the server), and ended with one line and exit 3, in seconds, below 1 GB
    assert seen >= 1
    _record(figures, f"scan answer {kind} {options}", run)
    _check(run, code=3, says=says, within_s=30)
    figures.bad_input(f"prometheus answer {kind}")


@pytest.mark.parametrize(("kind", "options", "says"), [ANSWERS[0], ANSWERS[2], ANSWERS[3]])
def test_hostile_prometheus_answer_to_doctor_is_bounded_by_the_environment(kind: str, options: dict[str, Any], says: str,
                                                                          figures: Any) -> None:
    # GIVEN the same trouble, and doctor (which reads no config) with the caps from the environment
    with HostileHttpServer(kind, **options) as server:
        run = _cli(["doctor", "--prometheus", server.url, "--at", AT],
                   env={"GPUWASTE_PROMETHEUS_MAX_ANSWER_MB": str(ANSWER_CAP_MB), "GPUWASTE_PROMETHEUS_ANSWER_DEADLINE_S": str(DEADLINE_S)})
    # THEN the same bounds hold on the doctor path
    _record(figures, f"doctor answer {kind}", run)
    _check(run, code=3, says=says, within_s=30)
    figures.bad_input(f"doctor answer {kind}")


def _sparse(path: Path, head: bytes, size: int = 3 << 30) -> Path:
    """A file of `size` bytes (3 GB) that costs no disk: `head`, then a hole."""
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


#: a 300 MB line without a newline (real bytes, not a hole: NUL bytes are refused on their own) must not be held whole
ENDLESS_LINE_BYTES = 300 << 20
ENDLESS_LINE_MAX_RSS_MB = 200


def _endless_line(path: Path) -> Path:
    with path.open("wb") as fh:
        fh.write(b'DCGM_FI_DEV_GPU_UTIL{gpu="0"} ')
        block = b"7" * (8 << 20)
        for _ in range(ENDLESS_LINE_BYTES // len(block)):
            fh.write(block)
    return path


def _demo_copy(tmp: Path) -> Path:
    return Path(shutil.copytree(local.demo_recording(), tmp / "rec"))


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _replace(path: Path, target: str) -> Path:
    path.unlink()
    path.symlink_to(target)
    return path.parent


FILES = [
    pytest.param(lambda t: ["scan", "--recording", "/dev/zero"], "a character device", id="recording-dev-zero"),
    pytest.param(lambda t: ["scan", "--recording", str(_fifo(t / "fifo"))], "a FIFO", id="recording-fifo"),
    pytest.param(lambda t: ["scan", "--recording", str(_endless_line(t / "telemetry.prom"))],
                 "a line longer than 64 KiB", id="line-without-newline-300MB"),
    pytest.param(lambda t: ["scan", "--recording", str(_replace(_demo_copy(t) / "cluster.json", "/dev/zero"))],
                 "a character device", id="cluster-json-dev-zero"),
    pytest.param(lambda t: ["scan", "--recording", str((lambda d: (_sparse((d / "cluster.json"), b'{"items": ['), d)[1])(_demo_copy(t)))],
                 "larger than 1024 MiB", id="cluster-json-3GB"),
    pytest.param(lambda t: ["scan", "--recording", str(_replace(_demo_copy(t) / "recording.json", "/dev/zero"))],
                 "a character device", id="recording-json-dev-zero"),
    pytest.param(lambda t: ["scan", "--recording", str(local.demo_recording()), "--truth", "/dev/zero"],
                 "a character device", id="truth-dev-zero"),
    pytest.param(lambda t: ["scan", "--recording", str(local.demo_recording()), "--truth",
                            str(_sparse(t / "truth.json", b"["))], "larger than 1024 MiB", id="truth-3GB"),
]


@pytest.mark.parametrize(("make", "says"), FILES)
def test_hostile_file_is_refused_before_it_is_read(make: Any, says: str, tmp_path: Path, figures: Any,
                                                   request: pytest.FixtureRequest) -> None:
    # GIVEN a special file, an endless line or a file far beyond its cap where a recording's file is read
    args = make(tmp_path)
    # WHEN the command reads it
    run = _cli(args, env={"GPUWASTE_RECORDING_MAX_LINE_KB": "64"})
    _record(figures, f"file {request.node.callspec.id}", run)
    # THEN one line, exit 2 (bad input), in seconds, below 1 GB — never read whole, never blocked on a FIFO
    _check(run, code=2, says=says, within_s=30)
    if "line longer" in says:
        assert run.max_rss_mb < ENDLESS_LINE_MAX_RSS_MB, run.max_rss_mb  # the line was not read whole
    figures.bad_input("hostile file")


CONFIGS = [
    pytest.param(lambda t: "/dev/zero", "a character device", id="dev-zero"),
    pytest.param(lambda t: str(_fifo(t / "config.yaml")), "a FIFO", id="fifo"),
    pytest.param(lambda t: str(_sparse(t / "config.yaml", b"scan:\n")), "larger than 1 MiB", id="3GB"),
    pytest.param(lambda t: _text(t, "scan:\n  window_s: " + "9" * 5000 + "\n"), "5,000 digits is out of range", id="huge-int"),
    pytest.param(lambda t: _text(t, "scan:\n  window_s: 3600\n  window_s: 7200\n"), "scan.window_s: duplicate key (lines 2 and 3)",
                 id="duplicate-key"),
    pytest.param(lambda t: _text(t, '{"delivery": {"slack": {"timeout_s": 5}, "slack": {"timeout_s": 6}}}'),
                 "delivery.slack: duplicate key", id="duplicate-key-json"),
]


def _text(tmp: Path, text: str) -> str:
    path = tmp / "config.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("make", "says"), CONFIGS)
def test_hostile_config_is_one_line_exit_2(make: Any, says: str, tmp_path: Path, figures: Any,
                                           request: pytest.FixtureRequest) -> None:
    # GIVEN a hostile configuration
    config = make(tmp_path)
    # WHEN a command loads it
    run = _cli(["scan", "--recording", str(local.demo_recording()), "--config", config, "-q"])
    _record(figures, f"config {request.node.callspec.id}", run)
    # THEN one line naming the problem, exit 2, in seconds, below 1 GB
    _check(run, code=2, says=says, within_s=30)
    figures.bad_input("hostile config")
