"""Benchmark: the pipeline after the scan (price → dedupe) through moto with 1,000 … 40,000 findings in one cluster.

What it shows (issue 23, 7(b)): that nothing in price and dedupe grows per finding with the fleet —

* **no message over SQS's limit**: every SQS client of the run refuses a message over 262,144 bytes as SQS does
  (`tests/sqs_limit.py`; moto alone accepts any size); the largest message sent is printed;
* **DynamoDB read and write units per finding**, for a first scan (every finding new), a steady scan (the same
  findings seen again 10 minutes later: nothing changed) and a scan that no longer sees 10 % of them (each counts a
  missed scan). Units are computed at the SDK boundary (botocore `after-call` hooks on the client) from the items'
  sizes with DynamoDB's published rules — write: 1 unit per 1 KB of the larger of the old and new item, ×2 in a
  transaction; each global secondary index whose key appears, disappears or changes: 1 (2 when it moves); read:
  1 unit per 4 KB strongly consistent, half eventually consistent (index queries), per item for BatchGetItem, per
  page for Query — since moto reports no consumed capacity;
* **dedupe's peak memory**: the tracemalloc peak of the record batches that carry a completion part (the only
  work of dedupe that sees the whole fleet) and of the first five batches of findings (bounded by the batch size);
  moto runs in a child process, so its memory is not counted.

Not a timed test: `python -m bench.pipeline_scale [--sizes 1000,4000,10000,40000] [--json out.json]` prints one
line per size. The findings are the demo fleet's, cloned with distinct workloads (`bench.chain.synth_messages`).
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
        self._params: dict[str, Any] = {}

    def _index_key(self, item: dict[str, Any] | None, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        if item is None or any(k not in item for k in keys):
            return None
        return tuple(json.dumps(item[k], sort_keys=True) for k in keys)

    def _put(self, item: dict[str, Any], *, factor: int = 1) -> None:
        key = item["fingerprint"]["S"]
        old = self.items.get(key)
        size = max(item_bytes(item), item_bytes(old) if old else 0)
        self.units["table_write"] += factor * max(1, math.ceil(size / 1024))
        for name, keys in self.indexes.items():
            before, after = self._index_key(old, keys), self._index_key(item, keys)
            if before == after:
                # an unchanged key: nothing for a keys-only index; one write (the item's size) for an ALL projection
                # whose item changed
                if name in self.projects_all and after is not None and item != old:
                    self.units["index_write"] += factor * max(1, math.ceil(item_bytes(item) / 1024))
                continue
            per_item = max(1, math.ceil(item_bytes(item) / 1024)) if name in self.projects_all else 1
            self.units["index_write"] += factor * per_item * ((before is not None) + (after is not None))
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
                self.units["table_write"] += max(1, math.ceil(item_bytes(params["Item"]) / 1024))
            else:
                self._put(params["Item"])
        elif op == "TransactWriteItems" and not failed:
            for entry in params["TransactItems"]:
                self._put(entry["Put"]["Item"], factor=2)
        elif op == "GetItem":
            item = parsed.get("Item")
            self.units["table_read"] += max(1, math.ceil(item_bytes(item) / 4096)) if item else 1
        elif op == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                self.units["table_read"] += sum(max(1, math.ceil(item_bytes(i) / 4096)) for i in items)
        elif op == "Query":
            size = sum(item_bytes(i) for i in parsed.get("Items", []))
            self.units["index_read"] += max(1, math.ceil(size / 4096)) * 0.5  # index reads: eventually consistent


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


def scan_through(messages: list[FindingMessage], completion: ScanCompleted, at: datetime, ports: dict[str, Any],
                 capacity: Capacity, heartbeat: timedelta = timedelta(0)) -> dict[str, Any]:
    """Send one scan's findings and completion, then price and dedupe them in record batches of 10, as the Lambda
    functions do (`queue.batching.SendBatch` per batch, dedupe's prefetch and deferred outbox clears)."""
    from gpuwaste.models.settings import LifecycleSettings
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.queue.batching import DeferredQueue, SendBatch
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.price import PriceService

    findings_q, priced_q, alerts_q, store, sqs = (ports[k] for k in ("findings", "priced", "alerts", "store", "sqs"))
    findings_q.send_findings(messages)
    findings_q.send_scan_completed(completion)
    sends = SendBatch()
    price = PriceService(price_book=PriceBook.bundled(), queue=DeferredQueue(priced_q, sends))
    bodies = _receive(sqs, findings_q.queue_url)
    for k in range(0, len(bodies), RECORD_BATCH):
        sends.begin()
        for i, body in enumerate(bodies[k:k + RECORD_BATCH]):
            sends.set_record(str(i))
            for m in read_stage_body(body):
                price.forward_completed(m) if isinstance(m, ScanCompleted) else price.price_and_forward(m)
        sends.flush()
    before = Counter(capacity.units)
    lifecycle = LifecycleService(store=store, alerts=DeferredQueue(alerts_q, sends), tickets=None,
                                 settings=LifecycleSettings(heartbeat=heartbeat), clock=FixedClock(at))
    lifecycle.defer_clears = True
    actions: Counter[str] = Counter()
    bodies = _receive(sqs, priced_q.queue_url)
    peaks: list[float] = []
    completion_units: Counter[str] = Counter()
    t = time.perf_counter()
    for k in range(0, len(bodies), RECORD_BATCH):
        group = bodies[k:k + RECORD_BATCH]
        # traced: every batch holding a completion part (what grows with the fleet) and the first 5 others
        traced = k < 5 * RECORD_BATCH or any('"fingerprints"' in b[:4096] for b in group)
        if traced:
            tracemalloc.start()
        records = [read_stage_body(b) for b in group]
        lifecycle.prefetch([m.finding.fingerprint for ms in records for m in ms if isinstance(m, FindingMessage)])
        sends.begin()
        for i, ms in enumerate(records):
            sends.set_record(str(i))
            for m in ms:
                if isinstance(m, FindingMessage):
                    out = lifecycle.handle_finding(m)
                else:  # the completion: its own units (reading the open set, then only the missed records)
                    start = Counter(capacity.units)
                    out = lifecycle.handle_scan_completed(m)
                    completion_units.update(capacity.units - start)
                actions.update(a.action.value for a in out.alerts)
        sends.flush()
        lifecycle.clear_outboxes()
        if traced:
            peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.stop()
    dedupe_s = time.perf_counter() - t
    peak = max(peaks, default=0.0) * 2**20
    _receive(sqs, alerts_q.queue_url)  # drained: notify is not measured here
    used = capacity.units - before
    return {"dedupe_s": dedupe_s, "dedupe_peak_mb": peak / 2**20, "alerts": dict(actions), "units": dict(used),
            "completion_units": dict(completion_units)}


def run_size(n: int, moto: Any, heartbeat: timedelta = timedelta(0)) -> dict[str, Any]:
    """Three scans of one cluster with `n` findings: new, unchanged, and 10 % gone."""
    import boto3

    from gpuwaste.queue.sqs import SqsQueue
    from gpuwaste.store.dynamodb import DynamoDbFindingStore
    from tests.sqs_limit import enforce_sqs_limit

    moto.reset()
    session = boto3.session.Session()
    limit = enforce_sqs_limit(session)
    sqs, ddb = session.client("sqs"), session.client("dynamodb")
    capacity = Capacity(create_table(ddb), projects_all())
    ddb.meta.events.register("before-parameter-build.dynamodb.*", capacity.before_call)
    ddb.meta.events.register("after-call.dynamodb.*", capacity.after_call)
    urls = {q: sqs.create_queue(QueueName=f"scale-{q}")["QueueUrl"] for q in ("findings", "priced", "alerts")}
    ports = {"sqs": sqs, "store": DynamoDbFindingStore(client=ddb, table_name=TABLE),
             **{q: SqsQueue(client=sqs, queue_url=u) for q, u in urls.items()}}
    messages, at = synth_messages(n)
    cluster = messages[0].finding.subject.cluster

    def completion(ms: list[FindingMessage], when: datetime) -> ScanCompleted:
        return ScanCompleted(scan_id=ms[0].scan_id, cluster=cluster, scheduled_time=when,
                             fingerprints=tuple(m.finding.fingerprint for m in ms))

    out: dict[str, Any] = {"findings": n, "heartbeat_s": heartbeat.total_seconds()}
    out["first"] = scan_through(messages, completion(messages, at), at, ports, capacity, heartbeat)
    again, later = next_scan(messages, at, 1)
    out["steady"] = scan_through(again, completion(again, later), later, ports, capacity, heartbeat)
    third, last = next_scan(messages, at, 2)
    kept = third[: n - n // 10]
    out["tenth_gone"] = scan_through(kept, completion(third, last).model_copy(
        update={"fingerprints": tuple(m.finding.fingerprint for m in kept)}), last, ports, capacity, heartbeat)
    out["tenth_gone"]["missed"] = n // 10
    out["largest_sqs_message_bytes"] = limit.largest
    out["sqs_messages"] = limit.messages
    out["sqs_refused"] = limit.refused
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def per_finding(scan: dict[str, Any], n: int) -> str:
    u = scan["units"]
    return (f"write {(u.get('table_write', 0) + u.get('index_write', 0)) / n:.2f} WU "
            f"(index {u.get('index_write', 0) / n:.2f}), read {(u.get('table_read', 0) + u.get('index_read', 0)) / n:.2f} RU "
            f"(index {u.get('index_read', 0) / n:.3f}), dedupe peak {scan['dedupe_peak_mb']:.1f} MB in {scan['dedupe_s']:.1f} s")


def summary_line(r: dict[str, Any]) -> str:
    n = r["findings"]
    gone = r["tenth_gone"]
    missed = max(1, gone["missed"])
    return (f"{n:>6,} findings (heartbeat {r['heartbeat_s']:.0f} s): largest SQS message {r['largest_sqs_message_bytes']:,} B of 262,144 "
            f"({r['sqs_messages']:,} sent, {r['sqs_refused']} refused)\n"
            f"        first scan  per finding: {per_finding(r['first'], n)}\n"
            f"        steady scan per finding: {per_finding(r['steady'], n)}\n"
            f"        10 % gone: the completion per missed finding: read {_read_units(gone['completion_units']) / missed:.2f} RU, "
            f"write {_write_units(gone['completion_units']) / missed:.2f} WU; per finding {per_finding(gone, n)}")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,4000,10000,40000")
    parser.add_argument("--json", default=None)
    parser.add_argument("--completion-only", action="store_true",
                        help="only the completion path at each size (table seeded; see completion_at_scale)")
    parser.add_argument("--heartbeat-s", type=int, default=0, help="lifecycle.heartbeat (0: every sighting written)")
    args = parser.parse_args(argv)
    results = []
    with _moto_process() as moto:
        saved = {k: os.environ.get(k) for k in moto.env()}
        os.environ.update(moto.env())
        try:
            for n in (int(s) for s in args.sizes.split(",")):
                if args.completion_only:
                    results.append(completion_at_scale(n, moto))
                    print(completion_line(results[-1]), flush=True)
                    continue
                results.append(run_size(n, moto, timedelta(seconds=args.heartbeat_s)))
                print(summary_line(results[-1]), flush=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
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
