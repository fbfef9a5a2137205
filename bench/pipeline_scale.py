"""Benchmark: the pipeline after the scan (price → dedupe) through moto's server, 1,000 … 40,000 findings in one
cluster and 50 clusters × 2,500 findings in one tick (issue 23, item 7(b)).

The stages run through their Lambda entry points (`functions/price_findings/app.py`, `functions/dedupe_findings/
app.py`: composition root, Powertools batch, outbox and all), 10 records per invocation as the SQS event source
mapping delivers them (`pump`); the scan's findings and completion are sent as the scan function sends them (packed,
the completion in parts). Three passes per case: a first scan (every finding new), a steady scan (the same findings
10 minutes later: nothing changed) and a scan that no longer sees 10 % of them, with `lifecycle.
resolve_after_missed_scans: 1` so each of those is resolved by that completion. What it prints:

* **no message over SQS's limit**: every SQS client of the run refuses a message over 262,144 bytes as SQS does
  (`tests/sqs_limit.py`, a botocore hook on the session; moto alone accepts any size); the largest message sent;
* **DynamoDB read and write units per finding** of each pass. Counted at the SDK boundary (botocore
  `before-parameter-build` / `after-call` hooks on the functions' DynamoDB client) from the items' sizes with
  DynamoDB's published rules, since moto reports no consumed capacity — write: 1 unit per 1 KB of the larger of the
  old and new item, ×2 in a transaction; each global secondary index whose key appears, disappears or changes: 1
  (2 when it moves); read: 1 unit per 4 KB strongly consistent, per item for BatchGetItem, half per 4 KB page for
  index queries; with the records read (GetItem/BatchGetItem items) and index keys read (Query items);
* **what a resolve reads**: the units and records read inside `handle_scan_completed` (the one dedupe call that
  sees the whole cluster) per missed, resolved finding;
* **dedupe's peak memory**: the tracemalloc peak of each dedupe invocation holding a completion part and of the
  first five (bounded by the batch size); moto runs in a child process, so its memory is not counted.

Not a timed test: `python -m bench.pipeline_scale [--sizes 1000,4000,10000,40000] [--clusters 50x2500] [--json out]`
prints a block per case and the flatness line (units and peak per finding, smallest vs largest size); `make bench`
runs it (`bench/run.py --pipeline-sizes/--pipeline-clusters`). The findings are the demo fleet's, cloned with
distinct workloads (`bench.chain.synth_messages`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.chain import FixedClock, next_scan, synth_messages
from gpuwaste.models.messages import FindingMessage, ScanCompleted, read_stage_body

TABLE = "scale-findings"
RECORD_BATCH = 10


# -- DynamoDB capacity, from the items (moto reports none) --------------------------------------------------------
def _value_bytes(value: dict[str, Any]) -> int:
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return len(str(v).lstrip("-").replace(".", "")) // 2 + 1
    if kind == "B":
        return len(v)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_bytes({kind[0]: x}) for x in v)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(x) for x in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_bytes(x) for k, x in v.items())
    return 1  # BOOL, NULL


def item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB's size of an item: attribute names plus values."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


class Capacity:
    """Read and write units of the calls one DynamoDB client makes, from their items; the index keys of
    template.yaml's table (`indexes`: name → key attributes), and a shadow of the table to see what a put replaces."""

    def __init__(self, indexes: dict[str, tuple[str, ...]], projects_all: frozenset[str] = frozenset()) -> None:
        self.indexes = indexes
        self.projects_all = projects_all  # indexes with an ALL projection (every attribute copied)
        self.items: dict[str, dict[str, Any]] = {}
        self.units: Counter[str] = Counter()
        self.completion: Counter[str] = Counter()  # the units spent while a scan completion is applied
        self.in_completion = False
        self._params: dict[str, Any] = {}

    def _add(self, kind: str, units: float) -> None:
        self.units[kind] += units
        if self.in_completion:
            self.completion[kind] += units

    def _index_key(self, item: dict[str, Any] | None, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        if item is None or any(k not in item for k in keys):
            return None
        return tuple(json.dumps(item[k], sort_keys=True) for k in keys)

    def _put(self, item: dict[str, Any], *, factor: int = 1) -> None:
        key = item["fingerprint"]["S"]
        old = self.items.get(key)
        size = max(item_bytes(item), item_bytes(old) if old else 0)
        self._add("table_write", factor * max(1, math.ceil(size / 1024)))
        for name, keys in self.indexes.items():
            before, after = self._index_key(old, keys), self._index_key(item, keys)
            if before == after:
                # an unchanged key: nothing for a keys-only index; one write (the item's size) for an ALL projection
                # whose item changed
                if name in self.projects_all and after is not None and item != old:
                    self._add("index_write", factor * max(1, math.ceil(item_bytes(item) / 1024)))
                continue
            per_item = max(1, math.ceil(item_bytes(item) / 1024)) if name in self.projects_all else 1
            self._add("index_write", factor * per_item * ((before is not None) + (after is not None)))
        self.items[key] = item

    def before_call(self, params: dict[str, Any], **_: Any) -> None:
        """`before-parameter-build`: the call's API parameters (the items written)."""
        self._params = params

    def after_call(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        """`after-call`: the units of the call, from its parameters and its answer."""
        params = self._params
        op = model.name
        failed = "Error" in parsed
        if op == "PutItem":
            if failed:
                self._add("table_write", max(1, math.ceil(item_bytes(params["Item"]) / 1024)))
            else:
                self._put(params["Item"])
        elif op == "TransactWriteItems" and not failed:
            for entry in params["TransactItems"]:
                self._put(entry["Put"]["Item"], factor=2)
        elif op == "GetItem":
            item = parsed.get("Item")
            self._add("items_read", 1 if item else 0)
            self._add("table_read", max(1, math.ceil(item_bytes(item) / 4096)) if item else 1)
        elif op == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                self._add("items_read", len(items))
                self._add("table_read", sum(max(1, math.ceil(item_bytes(i) / 4096)) for i in items))
        elif op == "Query":
            size = sum(item_bytes(i) for i in parsed.get("Items", []))
            self._add("index_items_read", len(parsed.get("Items", [])))  # keys (or projections) of an index
            self._add("index_read", max(1, math.ceil(size / 4096)) * 0.5)  # index reads: eventually consistent


def create_table(ddb: Any, name: str = TABLE) -> dict[str, tuple[str, ...]]:
    """template.yaml's FindingsTable in moto; returns its indexes' key attributes."""
    from tests.aws_resources import load_template

    props = load_template()["Resources"]["FindingsTable"]["Properties"]
    ddb.create_table(TableName=name, AttributeDefinitions=props["AttributeDefinitions"], KeySchema=props["KeySchema"],
                     BillingMode="PAY_PER_REQUEST", GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"])
    return {i["IndexName"]: tuple(k["AttributeName"] for k in i["KeySchema"]) for i in props["GlobalSecondaryIndexes"]}


def projects_all() -> frozenset[str]:
    """template.yaml's indexes with an ALL projection."""
    from tests.aws_resources import load_template

    props = load_template()["Resources"]["FindingsTable"]["Properties"]
    return frozenset(i["IndexName"] for i in props["GlobalSecondaryIndexes"] if i["Projection"]["ProjectionType"] == "ALL")


# -- one scan through price and dedupe ------------------------------------------------------------------------------
def _receive(sqs: Any, url: str) -> list[str]:
    bodies: list[str] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not got:
            return bodies
        bodies.extend(m["Body"] for m in got)
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(got)])


def _record(m: dict[str, Any], arn: str) -> dict[str, Any]:
    """One received SQS message as the event source mapping hands it to the function."""
    return {"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
            "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"}


def pump(sqs: Any, url: str, function: str, *, traced: Any = None, max_failures: int = 50) -> dict[str, Any]:
    """The event source mapping, played: receive up to 10, invoke `functions/<function>/app.py`'s handler (the Lambda
    entry point, composition root included), delete what succeeded, make a failed record visible again (SQS
    redelivers it; the functions are idempotent). `traced(bodies, k)` says whether invocation `k`'s tracemalloc peak
    is kept. Returns invocations, failed records, wall seconds and the kept peaks (MB).

    Raises:
        RuntimeError: more than `max_failures` records failed (a record failing for good would loop).
    """
    import contextlib as _c
    import io

    from tests.lambda_events import FakeLambdaContext, load_handler

    handler = load_handler(function)
    arn = f"arn:aws:sqs:us-east-1:123456789012:{url.rsplit('/', 1)[-1]}"
    out: dict[str, Any] = {"invocations": 0, "failed": 0, "seconds": 0.0, "peaks_mb": []}
    t = time.perf_counter()
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                  AttributeNames=["All"]).get("Messages", [])
        if not got:
            break
        trace = traced is not None and traced([m["Body"] for m in got], out["invocations"])
        if trace:
            tracemalloc.start()
        with _c.redirect_stdout(io.StringIO()):  # Powertools' EMF metrics
            response = handler.lambda_handler({"Records": [_record(m, arn) for m in got]}, FakeLambdaContext())
        if trace:
            out["peaks_mb"].append(tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.stop()
        out["invocations"] += 1
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        out["failed"] += len(failed)
        done = [m for m in got if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                            for i, m in enumerate(done)])
        for m in got:
            if m["MessageId"] in failed:  # the visibility timeout "expires" now
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        if out["failed"] > max_failures:
            raise RuntimeError(f"{function}: {out['failed']} records failed; last response {response}")
    out["seconds"] = time.perf_counter() - t
    return out


def _dedupe_traced(bodies: list[str], k: int) -> bool:
    """Traced: every dedupe invocation holding a completion part (what grows with the fleet) and the first five."""
    return k < 5 or any('"fingerprints"' in b[:4096] for b in bodies)


def scan_through(scans: list[tuple[list[FindingMessage], ScanCompleted]], aws: dict[str, Any],
                 capacity: Capacity) -> dict[str, Any]:
    """One scan per cluster: its findings and completion sent as the scan function sends them (packed, completion in
    parts), then price_findings and dedupe_findings run by their Lambda handlers, 10 records per invocation."""
    from gpuwaste.bootstrap import pipeline

    sqs, urls = aws["sqs"], aws["urls"]
    findings_q = pipeline.queue("findings_queue_url", urls["findings"])
    for messages, completion in scans:
        findings_q.send_findings(messages)
        findings_q.send_scan_completed(completion)
    price = pump(sqs, urls["findings"], "price_findings")
    before = Counter(capacity.units)
    capacity.completion.clear()
    dedupe = pump(sqs, urls["priced"], "dedupe_findings", traced=_dedupe_traced)
    alerts: Counter[str] = Counter()
    from gpuwaste.models.messages import read_alert_body

    for body in _receive(sqs, urls["alerts"]):  # counted, not delivered: notify is not measured here
        alerts.update(a.action.value for a in read_alert_body(body))
    return {"dedupe_s": dedupe["seconds"], "price_s": price["seconds"], "dedupe_invocations": dedupe["invocations"],
            "failed_records": price["failed"] + dedupe["failed"],
            "dedupe_peak_mb": max(dedupe["peaks_mb"], default=0.0), "dedupe_traced": len(dedupe["peaks_mb"]),
            "alerts": dict(alerts), "units": dict(capacity.units - before), "completion_units": dict(capacity.completion)}


_COUNTING: list[Capacity] = []  # the capacity counter of the size being run (for `_count_completions`)


def _count_completions() -> None:
    """Attribute the units spent inside `LifecycleService.handle_scan_completed` (called by dedupe's handler) to the
    completion: the method is wrapped once, its behaviour unchanged."""
    from gpuwaste.services.lifecycle import LifecycleService

    original = LifecycleService.handle_scan_completed
    if getattr(original, "_bench_counted", False):
        return

    def counted(self: Any, message: ScanCompleted, *args: Any, **kwargs: Any) -> Any:  # (message, batch)
        cap = _COUNTING[-1] if _COUNTING else None
        if cap is not None:
            cap.in_completion = True
        try:
            return original(self, message, *args, **kwargs)
        finally:
            if cap is not None:
                cap.in_completion = False

    counted._bench_counted = True  # type: ignore[attr-defined]
    LifecycleService.handle_scan_completed = counted  # type: ignore[method-assign]


def _aws(moto: Any, config: Path) -> tuple[dict[str, Any], Capacity, Any]:
    """A fresh moto (the template's table, three queues), the functions' environment pointing at it, the composition
    roots forgotten; SQS's size limit enforced on every client, DynamoDB's units counted on the functions' client."""
    import boto3

    from gpuwaste.bootstrap import dedupe as dedupe_root
    from gpuwaste.bootstrap import pipeline
    from gpuwaste.bootstrap import price as price_root
    from tests.sqs_limit import enforce_sqs_limit

    moto.reset()
    boto3.setup_default_session()
    limit = enforce_sqs_limit(boto3.DEFAULT_SESSION)
    pipeline.reset()
    price_root.pricing_service.cache_clear()
    dedupe_root.lifecycle_service.cache_clear()
    from botocore.config import Config

    # the bench's own SQS client (queues, receive, delete) waits longer than the functions' 20 s: moto is slow on a
    # loaded machine
    sqs = boto3.client("sqs", config=Config(read_timeout=300, retries={"max_attempts": 5, "mode": "standard"}))
    ddb = pipeline.client("dynamodb")
    capacity = Capacity(create_table(ddb), projects_all())
    ddb.meta.events.register("before-parameter-build.dynamodb.*", capacity.before_call)
    ddb.meta.events.register("after-call.dynamodb.*", capacity.after_call)
    _COUNTING[:] = [capacity]
    _count_completions()
    urls = {q: sqs.create_queue(QueueName=f"scale-{q}")["QueueUrl"] for q in ("findings", "priced", "alerts")}
    os.environ.update({"CONFIG_FILE": str(config), "FINDINGS_TABLE_NAME": TABLE, "PRICED_QUEUE_URL": urls["priced"],
                       "ALERTS_QUEUE_URL": urls["alerts"]})
    os.environ.pop("DEAD_LETTER_QUEUE_URL", None)
    os.environ.pop("TICKETS_QUEUE_URL", None)
    return {"sqs": sqs, "urls": urls}, capacity, limit


def run_size(n: int, moto: Any, heartbeat: timedelta = timedelta(0), *, clusters: int = 1,
             workdir: Path | None = None) -> dict[str, Any]:
    """Three scans of `clusters` clusters of `n` findings each: new, unchanged (10 min later), and 10 % gone (with
    `lifecycle.resolve_after_missed_scans: 1`, so each missed finding is resolved by that completion)."""
    import tempfile

    folder = Path(workdir or tempfile.mkdtemp(prefix="gpuwaste-pipeline-"))
    config = folder / "config.yaml"
    config.write_text(f"lifecycle:\n  heartbeat: {int(heartbeat.total_seconds())}\n  resolve_after_missed_scans: 1\n")
    aws, capacity, limit = _aws(moto, config)
    t0 = time.perf_counter()
    per_cluster = [synth_messages(n, cluster=f"bench-{c:02d}" if clusters > 1 else "bench") for c in range(clusters)]
    at = per_cluster[0][1]

    def completion(ms: list[FindingMessage], when: datetime, seen: list[FindingMessage] | None = None) -> ScanCompleted:
        return ScanCompleted(scan_id=ms[0].scan_id, cluster=ms[0].finding.subject.cluster, scheduled_time=when,
                             fingerprints=tuple(m.finding.fingerprint for m in (ms if seen is None else seen)))

    total = n * clusters
    out: dict[str, Any] = {"findings": total, "clusters": clusters, "findings_per_cluster": n,
                           "heartbeat_s": heartbeat.total_seconds()}
    out["first"] = scan_through([(ms, completion(ms, at)) for ms, _ in per_cluster], aws, capacity)
    again = [next_scan(ms, at, 1)[0] for ms, _ in per_cluster]
    later = at + timedelta(minutes=10)
    out["steady"] = scan_through([(ms, completion(ms, later)) for ms in again], aws, capacity)
    third = [next_scan(ms, at, 2)[0] for ms, _ in per_cluster]
    last = at + timedelta(minutes=20)
    kept = [ms[: n - n // 10] for ms in third]
    out["tenth_gone"] = scan_through([(k, completion(ms, last, k)) for ms, k in zip(third, kept, strict=True)],
                                     aws, capacity)
    out["tenth_gone"]["missed"] = clusters * (n // 10)
    out["resolved"] = out["tenth_gone"]["alerts"].get("resolved", 0)
    out["largest_sqs_message_bytes"] = limit.largest
    out["sqs_messages"] = limit.messages
    out["sqs_refused"] = limit.refused
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["wall_s"] = time.perf_counter() - t0
    return out


def per_finding(scan: dict[str, Any], n: int) -> str:
    """Units per finding of one scan pass, and dedupe's traced peak and wall."""
    u = scan["units"]
    return (f"write {(u.get('table_write', 0) + u.get('index_write', 0)) / n:.2f} WU "
            f"(index {u.get('index_write', 0) / n:.2f}), read {(u.get('table_read', 0) + u.get('index_read', 0)) / n:.2f} RU "
            f"(index {u.get('index_read', 0) / n:.3f}; {u.get('items_read', 0) / n:.2f} items read), "
            f"dedupe peak {scan['dedupe_peak_mb']:.1f} MB in {scan['dedupe_s']:.1f} s")


def summary_line(r: dict[str, Any]) -> str:
    """The lines `make bench` prints for one size."""
    n = r["findings"]
    gone = r["tenth_gone"]
    missed = max(1, gone["missed"])
    c = gone["completion_units"]
    shape = f"{r['clusters']} clusters × {r['findings_per_cluster']:,}" if r.get("clusters", 1) > 1 else "one cluster"
    return (f"{n:>7,} findings ({shape}, heartbeat {r['heartbeat_s']:.0f} s, {r.get('wall_s', 0):.0f} s): largest SQS message "
            f"{r['largest_sqs_message_bytes']:,} B of 262,144 ({r['sqs_messages']:,} sent, {r['sqs_refused']} refused); records "
            f"failed and redelivered: {sum(r[k].get('failed_records', 0) for k in ('first', 'steady', 'tenth_gone'))}\n"
            f"        first scan  per finding: {per_finding(r['first'], n)}\n"
            f"        steady scan per finding: {per_finding(r['steady'], n)}\n"
            f"        10 % gone ({r.get('resolved', 0):,} resolved of {gone['missed']:,} missed): the completions per missed "
            f"finding read {_read_units(c) / missed:.2f} RU ({c.get('items_read', 0) / missed:.2f} records), write "
            f"{_write_units(c) / missed:.2f} WU; per finding {per_finding(gone, n)}")


def _read_units(u: dict[str, float]) -> float:
    return u.get("table_read", 0) + u.get("index_read", 0)


def _write_units(u: dict[str, float]) -> float:
    return u.get("table_write", 0) + u.get("index_write", 0)


#: moto's server, less one cost of moto's own: its TransactWriteItems deep-copies the whole table once per item (a
#: rollback copy: O(table) per call, O(findings²) per scan), which AWS does not; the bench's transactions never
#: conflict, so that copy is skipped (a Table "copy" is the table itself). Everything else is moto as shipped.
_MOTO_MAIN = """
import copy, sys, types
import moto.dynamodb.models as models
from moto.dynamodb.models.table import Table
def deepcopy(x, memo=None):
    return x if isinstance(x, Table) else copy.deepcopy(x, memo)
models.copy = types.SimpleNamespace(deepcopy=deepcopy, copy=copy.copy)
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


class _MotoProcess:
    """moto's server in a child process (its memory and CPU are not this process's: the dedupe peak is ours)."""

    def __init__(self) -> None:
        import socket
        import subprocess
        import sys
        import urllib.request

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-c", _MOTO_MAIN, str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("moto server did not start")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        from tests.servers.moto_server import aws_env

        return aws_env(self.endpoint)

    def reset(self) -> None:
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b""),
                               timeout=30)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@contextlib.contextmanager
def _moto_process() -> Iterator[_MotoProcess]:
    moto = _MotoProcess()
    try:
        yield moto
    finally:
        moto.stop()


def flatness(results: list[dict[str, Any]]) -> str:
    """One line: each pass's units per finding at the smallest and the largest size, and their ratio (flat ≈ 1)."""
    runs = sorted((r for r in results if "first" in r), key=lambda r: r["findings"])
    if len(runs) < 2:
        return ""
    lo, hi = runs[0], runs[-1]
    parts = []
    for scan in ("first", "steady", "tenth_gone"):
        for name, units in (("WU", _write_units), ("RU", _read_units)):
            a, b = units(lo[scan]["units"]) / lo["findings"], units(hi[scan]["units"]) / hi["findings"]
            parts.append(f"{scan} {name} {a:.2f} → {b:.2f} ({b / a if a else float('nan'):.2f}×)")
        a, b = lo[scan]["dedupe_peak_mb"], hi[scan]["dedupe_peak_mb"]
        parts.append(f"{scan} dedupe peak {a:.1f} → {b:.1f} MB")
    return (f"per finding from {lo['findings']:,} to {hi['findings']:,} findings: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.pipeline_scale`: one block of lines per size, then the flatness line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,4000,10000,40000", help="findings in one cluster, comma-separated")
    parser.add_argument("--clusters", default="50x2500",
                        help="CLUSTERSxFINDINGS, comma-separated: that many clusters scanned in the same tick ('' for none)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--completion-only", action="store_true",
                        help="only the completion path at each size (table seeded; see completion_at_scale)")
    parser.add_argument("--heartbeat-s", type=int, default=0, help="lifecycle.heartbeat (0: every sighting written)")
    args = parser.parse_args(argv)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # the functions' per-finding INFO lines: not measured
    results: list[dict[str, Any]] = []
    cases = [(1, int(x)) for x in args.sizes.split(",") if x.strip()]
    if not args.completion_only:
        cases += [(int(c), int(n)) for c, n in (x.split("x") for x in args.clusters.split(",") if x.strip())]
    with _moto_process() as moto:
        saved = {k: os.environ.get(k) for k in moto.env()}
        os.environ.update(moto.env())
        try:
            for clusters, n in cases:
                if args.completion_only:
                    results.append(completion_at_scale(n, moto))
                    print(completion_line(results[-1]), flush=True)
                    continue
                results.append(run_size(n, moto, timedelta(seconds=args.heartbeat_s), clusters=clusters))
                print(summary_line(results[-1]), flush=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    line = flatness([r for r in results if r.get("clusters", 1) == 1])
    if line:
        print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


def completion_at_scale(n: int, moto: Any) -> dict[str, Any]:
    """The part of dedupe that sees the whole cluster, at `n` open findings: the table seeded with `n` open records
    (BatchWriteItem, outside the measurement), then one scan's completion naming 90 % of them sent through the queue
    adapter (in parts, SQS's limit enforced), forwarded by price and applied by dedupe: the parts recorded, the open
    fingerprints read, each missed record read and written once. Peak memory (tracemalloc) and units of that."""
    import boto3

    from gpuwaste.models.lifecycle import FindingRecord
    from gpuwaste.models.settings import LifecycleSettings
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.queue.sqs import SqsQueue
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.price import PriceService
    from gpuwaste.store.dynamodb import DynamoDbFindingStore, to_item
    from tests.sqs_limit import enforce_sqs_limit

    moto.reset()
    session = boto3.session.Session()
    limit = enforce_sqs_limit(session)
    sqs, ddb = session.client("sqs"), session.client("dynamodb")
    capacity = Capacity(create_table(ddb), projects_all())
    messages, at = synth_messages(min(n, 50))
    template = messages[0].finding
    items = []
    for i in range(n):
        f = template.model_copy(update={"subject": template.subject.model_copy(update={"workload_name": f"w-{i:06d}"})})
        items.append(to_item(FindingRecord(fingerprint=f.fingerprint, cluster=f.subject.cluster, kind=f.kind.value,
                                           detector=f.detector, first_seen=at, last_seen=at, last_scan_id="s0",
                                           finding_json=f.model_dump_json(exclude={"fingerprint"}), version=1,
                                           expires_at=2_000_000_000)))
    for k in range(0, len(items), 25):
        ddb.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": it}} for it in items[k:k + 25]]})
    for it in items:
        capacity.items[it["fingerprint"]["S"]] = it  # the shadow knows the seeded items (not counted)
    ddb.meta.events.register("before-parameter-build.dynamodb.*", capacity.before_call)
    ddb.meta.events.register("after-call.dynamodb.*", capacity.after_call)
    fps = [it["fingerprint"]["S"] for it in items]
    kept = fps[: n - n // 10]
    urls = {q: sqs.create_queue(QueueName=f"scale-{q}")["QueueUrl"] for q in ("findings", "priced", "alerts")}
    queues = {q: SqsQueue(client=sqs, queue_url=u) for q, u in urls.items()}
    later = at + timedelta(minutes=10)
    queues["findings"].send_scan_completed(ScanCompleted(scan_id="scan-big", cluster=template.subject.cluster,
                                                         scheduled_time=later, fingerprints=tuple(kept)))
    price = PriceService(price_book=PriceBook.bundled(), queue=queues["priced"])
    for body in _receive(sqs, urls["findings"]):
        for m in read_stage_body(body):
            price.forward_completed(m)
    store = DynamoDbFindingStore(client=ddb, table_name=TABLE)
    lifecycle = LifecycleService(store=store, alerts=queues["alerts"], tickets=None,
                                 settings=LifecycleSettings(), clock=FixedClock(later))
    bodies = _receive(sqs, urls["priced"])
    tracemalloc.start()
    t = time.perf_counter()
    applied = 0
    for body in bodies:
        for m in read_stage_body(body):
            applied += lifecycle.handle_scan_completed(m).applied
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    missed = sum(1 for r in store.get_many(fps[len(kept):]).values() if r.missed_scans == 1)
    return {"findings": n, "parts": len(bodies), "applied_by": applied, "missed": missed, "seconds": seconds,
            "peak_mb": peak, "units": dict(capacity.units), "largest_sqs_message_bytes": limit.largest,
            "sqs_refused": limit.refused}


def completion_line(r: dict[str, Any]) -> str:
    u, n, missed = r["units"], r["findings"], max(1, r["missed"])
    return (f"{n:>6,} open findings, completion naming 90 %: {r['parts']} parts (largest SQS message "
            f"{r['largest_sqs_message_bytes']:,} B, {r['sqs_refused']} refused), applied once ({r['applied_by']}); "
            f"{r['missed']:,} missed; dedupe peak {r['peak_mb']:.1f} MB in {r['seconds']:.1f} s; "
            f"per missed finding read {_read_units(u) / missed:.2f} RU, write {_write_units(u) / missed:.2f} WU; "
            f"per open finding read {_read_units(u) / n:.3f} RU (index {u.get('index_read', 0) / n:.4f})")


if __name__ == "__main__":
    raise SystemExit(main())
