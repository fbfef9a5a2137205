"""Benchmark helper: the two reference strategies the scan is measured against.

* **floor** — replay the exact PromQL requests our scan sent (recorded at the counting proxy) with plain
  `http.client`, `concurrency` connections, each response merely `json.loads`-ed: what fetching the data
  itself costs, with none of our work.
* **naive** — what per-workload tools do: one instant query per pod and per signal,
  `avg_over_time(<signal>{pod="<pod>",namespace="<ns>"}[<window>])` (or the `exported_*` labels, joined
  with `or`), also with `concurrency` connections. It only ever sees GPUs that a pod holds.

Both also report Prometheus's own evaluation time when asked (`stats=all`, summing
`data.stats.timings.evalTotalTime`).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

NAIVE_SIGNALS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE")


@dataclass
class RunStats:
    """The result of issuing a set of PromQL requests."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    requests: int = 0
    bytes: int = 0
    eval_s: float = 0.0
    series: int = 0
    uuids: set[str] = field(default_factory=set)
    per_request: list[dict[str, Any]] = field(default_factory=list)


class _Client:
    """One keep-alive connection per thread to a Prometheus-compatible base URL."""

    def __init__(self, base_url: str, *, gzip: bool = False) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.gzip = gzip
        self._local = threading.local()

    def get(self, path: str, params: Sequence[tuple[str, str]]) -> bytes:
        body = urllib.parse.urlencode(params).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept-Encoding": "gzip" if self.gzip else "identity"}
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{path} answered {resp.status}: {data[:200]!r}")
                if resp.getheader("Content-Encoding") == "gzip":
                    return zlib.decompress(data, 16 + zlib.MAX_WBITS)
                return data
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def issue(base_url: str, plan: Iterable[tuple[str, Sequence[tuple[str, str]]]], *, concurrency: int = 4, stats: bool = False,
          collect_uuids: bool = False, gzip: bool = False) -> RunStats:
    """Send every (path, params) request of `plan` with `concurrency` connections; parse each JSON body.

    Args:
        base_url: Prometheus (or a proxy in front of it).
        plan: the requests, e.g. `("/api/v1/query", [("query", "..."), ("time", "...")])`.
        concurrency: parallel connections.
        stats: add `stats=all` and sum Prometheus's `evalTotalTime`.
        collect_uuids: remember every `UUID`/`uuid` label value seen in the results.
        gzip: ask for gzip (as `requests` does by default) and decompress; `bytes` stays the decoded size.
    """
    client = _Client(base_url, gzip=gzip)
    out = RunStats()
    lock = threading.Lock()
    requests = [(path, [*[(k, v) for k, v in params if k != "stats"], *([("stats", "all")] if stats else [])]) for path, params in plan]

    def one(req: tuple[str, list[tuple[str, str]]]) -> None:
        t0 = time.perf_counter()
        data = client.get(*req)
        doc: dict[str, Any] = json.loads(data)
        wall = time.perf_counter() - t0
        result = doc.get("data", {}).get("result", [])
        evaluated = float(doc.get("data", {}).get("stats", {}).get("timings", {}).get("evalTotalTime", 0.0))
        uuids = {r["metric"].get("UUID") or r["metric"].get("uuid") for r in result} if collect_uuids else set()
        with lock:
            out.requests += 1
            out.bytes += len(data)
            out.series += len(result)
            out.eval_s += evaluated
            out.uuids |= {u for u in uuids if u}
            if stats:
                query = dict(req[1]).get("query", "")
                out.per_request.append({"query": query, "eval_s": evaluated, "wall_s": wall, "bytes": len(data), "series": len(result)})

    c0, t0 = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for fut in [pool.submit(one, r) for r in requests]:
            fut.result()
    out.wall_s, out.cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return out


def naive_plan(pods: Iterable[tuple[str, str]], *, at: float, window_s: int) -> list[tuple[str, list[tuple[str, str]]]]:
    """One instant query per (namespace, pod) and per signal in `NAIVE_SIGNALS`."""
    plan = []
    for ns, pod in pods:
        for signal in NAIVE_SIGNALS:
            q = (f'avg_over_time({signal}{{namespace="{ns}",pod="{pod}"}}[{window_s}s]) or '
                 f'avg_over_time({signal}{{exported_namespace="{ns}",exported_pod="{pod}"}}[{window_s}s])')
            plan.append(("/api/v1/query", [("query", q), ("time", f"{at:.3f}")]))
    return plan
