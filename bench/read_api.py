"""Benchmark: the read API of `gpuwaste serve` (/api/v1, commands/api/) over plain HTTP at store sizes.

The demo's state file (`gpuwaste demo --state`) is grown to N records by cloning its records under new fingerprints
and namespaces (the store's own `put_new`), then a real `Server.run` serves it on 127.0.0.1 and the script times
sequential GET requests (one connection per request, as urllib makes them) of a filtered findings page, one explain
document and the 7-day summary. Every read opens the state file and reads its whole history (no index is used), so
the time grows with N: these numbers say where that starts to matter. The rate limit is lifted for the run.

    PYTHONPATH=shared:. python bench/read_api.py [--sizes 36,1000,5000] [--requests 50]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.commands import api
from gpuwaste.commands.api import documents, http
from gpuwaste.commands.serve import Server
from gpuwaste.config import GpuWasteConfig
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.servers.ports import free_port

ALL = documents._ALL_TIME


def grow(state: Path, size: int) -> int:
    store = SqliteFindingStore(state)
    try:
        base = store.history(since=ALL[0], until=ALL[1])
        n = len(base)
        i = 0
        while n < size:
            for r in base:
                if n >= size:
                    break
                fp = hashlib.sha256(f"{r.fingerprint}-{i}".encode()).hexdigest()
                store.put_new(r.model_copy(update={"fingerprint": fp, "namespace": f"{r.namespace}-{i}", "version": 0}))
                n += 1
            i += 1
        return n
    finally:
        store.close()


def timed(url: str, token: str, count: int) -> list[float]:
    out = []
    for _ in range(count):
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="36,1000,5000")
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    http.RATE_PER_S, http.RATE_BURST = 1e9, 10**9
    print(f"{'records':>8} {'endpoint':<44} {'median ms':>10} {'p95 ms':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "state.db"
            assert CliRunner().invoke(app, ["demo", "-q", "--state", str(state)]).exit_code == 0
            n = grow(state, size)
            sources = local.recording_sources(local.demo_recording(), GpuWasteConfig())
            assert sources.recording is not None
            cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
            server = Server(
                sources,
                cfg,
                cluster=sources.recording.cluster,
                window_s=sources.recording.meta.window_s,
                state=state,
                interval_s=86400,
                fixed_time=sources.recording.end_time(),
                api_token="t",
            )
            port = free_port()
            thread = threading.Thread(target=server.run, kwargs={"host": "127.0.0.1", "port": port}, daemon=True)
            thread.start()
            base = f"http://127.0.0.1:{port}"
            for _ in range(400):
                try:
                    urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
                    break
                except OSError:
                    time.sleep(0.05)
            time.sleep(1.0)  # let the first scan finish
            fp = api.FindingsReader(state, cfg).list_findings(limit=1).items[0].fingerprint
            for path in (
                "/api/v1/findings?state=open&limit=100",
                f"/api/v1/findings/{fp[:10]}",
                "/api/v1/summary?period=7d",
            ):
                ms = sorted(timed(base + path, "t", args.requests))
                print(f"{n:>8} {path[:44]:<44} {statistics.median(ms):>10.1f} {ms[int(len(ms) * 0.95) - 1]:>8.1f}")
            server.stopped.set()
            thread.join(timeout=60)


if __name__ == "__main__":
    main()
