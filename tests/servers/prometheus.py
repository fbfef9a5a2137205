"""Test server: a real Prometheus backfilled from an OpenMetrics file with promtool, on a random loopback port.

Flow (each step measured in ``/work/shared/reference/test-infrastructure.md``):

1. ``promtool tsdb create-blocks-from openmetrics -q --max-block-duration=24h <file> <workdir>/data``
   (the hidden ``--max-block-duration`` flag avoids 1 ms blocks at 2 h boundaries; the helper retries
   without it on a promtool that does not know it);
2. ``prometheus`` with an empty ``global: {}`` config, so the TSDB holds only the backfilled blocks,
   ``--storage.tsdb.retention.time=100y`` (retention counts from the newest block, and the fixtures are
   dated 2024) and ``--query.lookback-delta=5m``;
3. poll ``/-/ready``.

The OpenMetrics file must use unix-second timestamps and end with ``# EOF`` as its very last line.
Queries must pass an explicit evaluation ``time`` (the data is fixed history, not "now").
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tests.servers.ports import free_port

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["PrometheusFactory", "PrometheusServer", "PrometheusUnavailableError", "prometheus_available"]

INSTALL_HINT = (
    "prometheus and promtool are needed on PATH for this test. Install them with "
    "`apt-get install --no-install-recommends prometheus` (Debian/Ubuntu), or run `make test`, which installs them."
)
_READY_TIMEOUT_S = 30.0
_BACKFILL_TIMEOUT_S = 120.0


class PrometheusUnavailableError(RuntimeError):
    """The prometheus or promtool binary is missing."""


def prometheus_available() -> bool:
    """Whether both ``prometheus`` and ``promtool`` are on PATH."""
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


class PrometheusServer:
    """A Prometheus process serving the samples of one OpenMetrics file.

    Args:
        openmetrics: the ``.om`` file to backfill.
        workdir: where the TSDB, config and log go; a fresh temporary directory (removed by
            :meth:`stop`) when omitted. Never point it at a committed fixture directory: Prometheus
            writes into and compacts its data directory.
    """

    def __init__(self, openmetrics: Path, workdir: Path | None = None) -> None:
        self.openmetrics = Path(openmetrics)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="gpuwaste-prom-"))
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (for ``PrometheusConnect(url=...)``)."""
        if self._process is None:
            raise RuntimeError("Prometheus is not started; call start() first")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        """Backfill, start Prometheus and wait until ``/-/ready`` answers 200.

        Raises:
            PrometheusUnavailableError: prometheus or promtool is not installed.
            RuntimeError: the backfill failed or Prometheus did not become ready (its log is included).
        """
        if self._process is not None:
            return self
        if not prometheus_available():
            raise PrometheusUnavailableError(INSTALL_HINT)
        if not self.openmetrics.is_file():
            raise FileNotFoundError(f"OpenMetrics file not found: {self.openmetrics}")
        data_dir = self.workdir / "data"
        self._backfill(data_dir)
        config = self.workdir / "prom.yml"
        config.write_text("global: {}\n")
        self.port = free_port()
        log_path = self.workdir / "prometheus.log"
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data_dir}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=100y",
                    "--log.level=warn",
                    "--query.lookback-delta=5m",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready(log_path)
        except BaseException:
            self.stop()
            raise
        return self

    def backfill_rules(self, rules_file: Path, *, start: int, end: int, eval_interval: str = "5m") -> None:
        """Evaluate recording rules over `[start, end]` (unix seconds) with promtool and serve the result.

        ``promtool tsdb create-blocks-from rules`` queries this server, writes blocks of the recorded series;
        they are moved into the data directory and Prometheus is restarted (it loads new blocks at start).

        Raises:
            RuntimeError: promtool failed or Prometheus did not come back.
        """
        out = self.workdir / "rule-blocks"
        shutil.rmtree(out, ignore_errors=True)
        result = _run(["promtool", "tsdb", "create-blocks-from", "rules", f"--start={start}", f"--end={end}", f"--url={self.url}",
                       f"--output-dir={out}", f"--eval-interval={eval_interval}", str(rules_file)])
        if result.returncode != 0:
            raise RuntimeError(f"promtool rules backfill failed (rc={result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
        data_dir = self.workdir / "data"
        for block in out.iterdir():
            if block.is_dir():
                shutil.move(str(block), str(data_dir / block.name))
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            process.wait(timeout=20)
        log_path = self.workdir / "prometheus.log"
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(self._argv(data_dir), stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready(log_path)

    def _argv(self, data_dir: Path) -> list[str]:
        return [
            "prometheus",
            f"--config.file={self.workdir / 'prom.yml'}",
            f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=100y",
            "--log.level=warn",
            "--query.lookback-delta=5m",
        ]

    def terminate(self) -> None:
        """Send SIGTERM without waiting (Prometheus takes about 2 s to exit); :meth:`stop` still cleans up.

        Lets a fixture shut several servers down in parallel.
        """
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

    def stop(self) -> None:
        """Terminate Prometheus (kill after 10 s) and remove an owned work directory. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _backfill(self, data_dir: Path) -> None:
        base = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q"]
        args = [str(self.openmetrics), str(data_dir)]
        result = _run([*base, "--max-block-duration=24h", *args])
        if result.returncode != 0 and "max-block-duration" in result.stderr:
            shutil.rmtree(data_dir, ignore_errors=True)  # older/newer promtool without the hidden flag
            result = _run([*base, *args])
        if result.returncode != 0:
            raise RuntimeError(
                f"promtool backfill of {self.openmetrics} failed (rc={result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )

    def _wait_ready(self, log_path: Path) -> None:
        assert self._process is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        ready_url = f"http://127.0.0.1:{self.port}/-/ready"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with rc={self._process.returncode} before becoming ready:\n"
                    f"{log_path.read_text(errors='replace')}"
                )
            try:
                with urllib.request.urlopen(ready_url, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.02)
        raise RuntimeError(
            f"prometheus not ready after {_READY_TIMEOUT_S:.0f} s:\n{log_path.read_text(errors='replace')}"
        )


class PrometheusFactory(Protocol):
    """The ``prometheus_factory`` fixture: a started server for an OpenMetrics file (cached per file)."""

    def __call__(self, openmetrics: Path) -> PrometheusServer: ...


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=_BACKFILL_TIMEOUT_S, check=False)
