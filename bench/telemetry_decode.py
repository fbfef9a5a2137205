"""Benchmark: the CPU our side spends reading a scan's telemetry answers (decode + buckets + assembly), without Prometheus.

`python -m bench.telemetry_decode capture URL AT WINDOW_S FILE` runs one telemetry read against a live Prometheus and
saves every answer body (gzip) to FILE; `python -m bench.telemetry_decode replay FILE [RUNS]` replays those answers to
`PrometheusGpuMetricsSource.telemetry` (one connection, no network, the garbage collector paused as in a scan) and prints the CPU seconds of each run, the bytes
read and the GPUs assembled, so a change to the readers is measured apart from Prometheus and the machine's load.
`CONCURRENCY=4` replays with the scan's four connections (threads; for memory, e.g. under `tracemalloc`).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import requests


class _Recorder:
    """Wraps a requests session: answers from `store` when replaying, else records each answer body."""

    def __init__(self, session: requests.Session, store: dict[str, bytes], replay: bool) -> None:
        self.session = session
        self.store = store
        self.replay = replay
        self.verify = session.verify

    def request(self, method: str, url: str, params: Any = None, **kwargs: Any) -> requests.Response:
        key = url.rsplit("/api/v1/", 1)[-1] + " " + json.dumps(params, sort_keys=True)
        if self.replay:
            response = requests.Response()
            response.status_code = 200
            response._content = self.store[key]
            return response
        response = self.session.request(method, url, params=params, **kwargs)
        self.store[key] = response.content
        return response


def _source(url: str, store: dict[str, bytes], replay: bool) -> Any:
    from gpuwaste.models.settings import PrometheusSettings
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, concurrency=int(os.environ.get("CONCURRENCY", "1"))), cluster="bench")
    recorder = _Recorder(source.client._session, store, replay)
    source.client._session = recorder
    source.instant_query = _instant(source, recorder)  # type: ignore[method-assign]
    return source


def _instant(source: Any, recorder: _Recorder) -> Any:
    def instant_query(promql: str, *, at: datetime | None, what: str = "query") -> Any:
        params = {"query": promql} if at is None else {"query": promql, "time": f"{at.timestamp():.3f}"}
        response = recorder.request("GET", f"{source.client.url}/api/v1/query", params=params)
        return json.loads(response.content)["data"]["result"]

    return instant_query


def main(argv: list[str]) -> int:
    """capture URL AT WINDOW_S FILE | replay FILE [RUNS]"""
    if argv[1] == "capture":
        url, at, window_s, path = argv[2], datetime.fromisoformat(argv[3]), int(argv[4]), argv[5]
        store: dict[str, bytes] = {}
        _source(url, store, replay=False).telemetry(at=at, window=timedelta(seconds=window_s))
        with gzip.open(path, "wb", compresslevel=1) as f:
            pickle.dump({"at": at, "window_s": window_s, "store": store}, f)
        print(json.dumps({"answers": len(store), "mb": round(sum(map(len, store.values())) / 1e6, 1)}))
        return 0
    with gzip.open(argv[2], "rb") as f:
        saved = pickle.load(f)  # noqa: S301 - our own capture file
    runs = int(argv[3]) if len(argv) > 3 else 3
    from gpuwaste.models.collector import PAUSED_COLLECTOR
    cpu: list[float] = []
    gpus = 0
    for _ in range(runs):
        source = _source("http://127.0.0.1:1", saved["store"], replay=True)
        c0 = time.process_time()
        with PAUSED_COLLECTOR:  # as the scan reads it (services.scan)
            tw = source.telemetry(at=saved["at"], window=timedelta(seconds=saved["window_s"]))
        cpu.append(round(time.process_time() - c0, 2))
        gpus = len(tw.gpus)
    print(json.dumps({"cpu_s": cpu, "best_cpu_s": min(cpu), "gpus": gpus, "plan": tw.plan, "queries": tw.query_count,
                      "mb": round(sum(map(len, saved["store"].values())) / 1e6, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
