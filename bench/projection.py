"""Benchmark helper: project the measured per-scan and per-finding costs past one machine.

Scenario: `CLUSTERS` clusters of `GPUS_PER_CLUSTER` GPUs each, one scan per cluster every
`SCAN_PERIOD_S` seconds (the EventBridge schedule), one Lambda invocation per scan; findings flow through
price → dedupe → notify in SQS batches of 10 messages, each carrying several findings (the findings per invocation
measured on moto). Inputs come from this run: the largest fleet's scan
(duration, peak memory, findings per scan) and the moto run (SQS/DynamoDB calls per finding, item sizes, and the
DynamoDB capacity units per finding of the table and of its global secondary indexes, writes and reads apart).

Prices: AWS public list prices for us-east-1 (x86 Lambda, SQS standard, DynamoDB on-demand), as
published on aws.amazon.com/{lambda,sqs,dynamodb}/pricing — DynamoDB on-demand after its 50 % cut of
2024-11-01; Lambda and SQS unchanged since. Free tiers are ignored. Check the pages before relying on them.
"""

from __future__ import annotations

import math
from typing import Any

from bench.sizing import scan_size, shards_for

CLUSTERS = 100
GPUS_PER_CLUSTER = 10_000
SCAN_PERIOD_S = 600
MONTH_S = 30 * 86400
PRICES = {
    "as_of": "2025 list prices (DynamoDB on-demand as cut on 2024-11-01), us-east-1",
    "lambda_usd_per_gb_s": 0.0000166667,
    "lambda_usd_per_million_requests": 0.20,
    "sqs_standard_usd_per_million_requests": 0.40,
    "dynamodb_usd_per_million_wru": 0.625,
    "dynamodb_usd_per_million_rru": 0.125,
}
LIMITS = {
    "lambda_concurrency_default": 1000,  # per account and region, raisable
    "lambda_max_timeout_s": 900,
    "sqs_standard_api_per_s": None,  # "nearly unlimited" API calls per second per standard queue
    "sqs_standard_inflight": 120_000,
    "dynamodb_table_max_rru_per_s": 40_000,  # default on-demand table throughput quota, raisable
    "dynamodb_table_max_wru_per_s": 40_000,
}
# Lambda sizes of the steps after the scan, from their measured CPU per finding (dominated by pydantic and
# JSON): one batch of 10 findings takes milliseconds; 256 MB is the smallest size that imports boto3 + pydantic
# comfortably.
STAGE_MEMORY_MB = {"price_findings": 256, "dedupe_findings": 256, "notify_slack": 256}


def project(report: dict[str, Any]) -> dict[str, Any]:
    """The projection from a finished benchmark report (sizes + chain)."""
    sizes = [s for s in report.get("sizes", []) if s.get("ours_s")]
    if not sizes:
        return {"error": "no scan measured"}
    big = max(sizes, key=lambda s: s["gpus"])
    scale = GPUS_PER_CLUSTER / big["gpus"]  # 1.0 when the 10,000-GPU size was measured
    scan_s = big["ours_s"] * scale
    base_mb = big.get("rss_before_scan_mb", 0.0)
    peak_mb = base_mb + (big["peak_rss_mb"] - base_mb) * max(scale, 1.0)
    findings_per_scan = big["findings"] * scale
    shards = shards_for(GPUS_PER_CLUSTER)
    row = scan_size(math.ceil(GPUS_PER_CLUSTER / shards))  # the one sizing table (bench/sizing.py), per shard
    scan_mem_mb = row.memory_mb
    # on Lambda the scan gets a share of a vCPU proportional to memory (1 vCPU at 1,769 MB); this run had
    # 2 cores shared with Prometheus, so CPU-bound parts may run slower below 1,769 MB.
    cpu_s = big["ours_cpu_s"] * scale
    lambda_scan_s = max(scan_s, cpu_s * max(1.0, 1769 / scan_mem_mb))
    scans_per_month = CLUSTERS * MONTH_S / SCAN_PERIOD_S
    findings_per_month = scans_per_month * findings_per_scan

    aws_first = report.get("chain", {}).get("aws", {})
    # every scan re-sends every open finding: the steady state (the same findings seen again) is what repeats
    aws = {**aws_first, **aws_first.get("steady", {})} if "error" not in aws_first else {}
    sqs_ours = aws.get("sqs_calls_per_finding", 0.1)
    sqs_esm = aws.get("sqs_esm_calls_per_finding", 0.2)
    ddb_reads = aws.get("dynamodb_reads_per_finding", 2.0)
    ddb_writes = aws.get("dynamodb_writes_per_finding", 2.0)
    item_kb = aws.get("item_kb", 4.0)
    wru_per_write = max(1, math.ceil(item_kb))
    rru_per_read = max(1, math.ceil(item_kb / 4))  # strongly consistent: 1 RRU per 4 KB
    local = report.get("chain", {}).get("local", {})
    chain_cpu_s_per_finding = (local.get("timings_s", {}).get("total", 0.0) / local["findings"]) if local.get("findings") else 0.002

    per_invocation = aws_first.get("findings_per_invocation", {}) if "error" not in aws_first else {}
    per_price = max(1.0, per_invocation.get("findings", 10.0))  # packed SQS messages: many findings per record
    per_dedupe = max(1.0, per_invocation.get("priced", 10.0))
    invocations = {
        "scan_gpu_waste": scans_per_month,
        "price_findings": findings_per_month / per_price,
        "dedupe_findings": findings_per_month / per_dedupe,
        "notify_slack": scans_per_month * 21 / 10,  # steady state: new/worse/reminder alerts only, ~one digest per owner
    }
    gb_s = {
        "scan_gpu_waste": scans_per_month * lambda_scan_s * scan_mem_mb / 1024,
        "price_findings": invocations["price_findings"] * max(0.05, per_price * chain_cpu_s_per_finding * 0.2) * STAGE_MEMORY_MB["price_findings"] / 1024,
        "dedupe_findings": invocations["dedupe_findings"] * max(0.1, per_dedupe * chain_cpu_s_per_finding * 0.6) * STAGE_MEMORY_MB["dedupe_findings"] / 1024,
        "notify_slack": invocations["notify_slack"] * 1.0 * STAGE_MEMORY_MB["notify_slack"] / 1024,
    }
    sqs_requests = findings_per_month * (sqs_ours + sqs_esm)
    # capacity units per finding measured from the items (table and global secondary indexes apart) when the run
    # has them (bench/chain.aws_calls → bench/pipeline_scale.Capacity); else calls × item size, table only
    if "table_write_units_per_finding" in aws:
        table_wru, index_wru = aws["table_write_units_per_finding"], aws["index_write_units_per_finding"]
        table_rru, index_rru = aws["table_read_units_per_finding"], aws["index_read_units_per_finding"]
    else:
        table_wru, index_wru = ddb_writes * wru_per_write, 0.0
        table_rru, index_rru = ddb_reads * rru_per_read, 0.0
    ddb_rru = findings_per_month * (table_rru + index_rru)
    ddb_wru = findings_per_month * (table_wru + index_wru)
    cost = {
        "lambda_compute": sum(gb_s.values()) * PRICES["lambda_usd_per_gb_s"],
        "lambda_requests": sum(invocations.values()) / 1e6 * PRICES["lambda_usd_per_million_requests"],
        "sqs": sqs_requests / 1e6 * PRICES["sqs_standard_usd_per_million_requests"],
        "dynamodb_writes": ddb_wru / 1e6 * PRICES["dynamodb_usd_per_million_wru"],
        "dynamodb_reads": ddb_rru / 1e6 * PRICES["dynamodb_usd_per_million_rru"],
    }
    total = sum(cost.values())
    waste_usd_per_month = big.get("usd_per_day", 0.0) * scale * CLUSTERS * 30
    # peaks: all clusters' scans fire at the same minute
    findings_burst = CLUSTERS * findings_per_scan
    return {
        "clusters": CLUSTERS, "gpus_per_cluster": GPUS_PER_CLUSTER, "scan_period_s": SCAN_PERIOD_S,
        "measured_at_gpus": big["gpus"], "scale_from_measured": scale,
        "scan": {"duration_s": lambda_scan_s, "peak_rss_mb": peak_mb, "memory_mb": scan_mem_mb,
                 "timeout_s": row.timeout_s, "shards": shards, "sizing_row_gpus": row.gpus,
                 "concurrency_peak": CLUSTERS, "concurrency_avg": CLUSTERS * lambda_scan_s / SCAN_PERIOD_S},
        "findings_per_scan": findings_per_scan, "findings_per_month": findings_per_month,
        "invocations_per_month": invocations, "gb_s_per_month": gb_s,
        "sqs_requests_per_month": sqs_requests,
        "sqs_requests_per_s_avg": sqs_requests / MONTH_S,
        "sqs_burst_messages": findings_burst, "sqs_inflight_limit": LIMITS["sqs_standard_inflight"],
        "dynamodb_wru_per_s_avg": ddb_wru / MONTH_S, "dynamodb_rru_per_s_avg": ddb_rru / MONTH_S,
        "dynamodb_wru_burst_per_s": findings_burst * (table_wru + index_wru) / 60,
        "dynamodb_units_per_finding": {"table_write": table_wru, "index_write": index_wru, "table_read": table_rru,
                                       "index_read": index_rru},
        "dynamodb_limit_per_s": LIMITS["dynamodb_table_max_wru_per_s"],
        "lambda_concurrency_limit": LIMITS["lambda_concurrency_default"],
        "cost_usd_per_month": cost, "total_usd_per_month": total,
        "waste_reported_usd_per_month": waste_usd_per_month,
        "cost_over_waste": total / waste_usd_per_month if waste_usd_per_month else None,
        "prices": PRICES, "limits": LIMITS, "stage_memory_mb": STAGE_MEMORY_MB,
        "inputs": {"sqs_calls_per_finding": sqs_ours, "sqs_esm_calls_per_finding": sqs_esm, "dynamodb_reads_per_finding": ddb_reads,
                   "dynamodb_writes_per_finding": ddb_writes, "item_kb": item_kb, "chain_s_per_finding": chain_cpu_s_per_finding},
    }


def _units(p: dict[str, Any]) -> str:
    u = p.get("dynamodb_units_per_finding", {})
    return (f"per finding: table {u.get('table_write', 0):.2f} + index {u.get('index_write', 0):.2f} WRU, "
            f"table {u.get('table_read', 0):.2f} + index {u.get('index_read', 0):.3f} RRU")


def summary_lines(p: dict[str, Any]) -> str:
    """Human-readable lines for the terminal."""
    if "error" in p:
        return f"projection: {p['error']}"
    s = p["scan"]
    c = p["cost_usd_per_month"]
    return (f"projection {p['clusters']} clusters × {p['gpus_per_cluster']:,} GPUs every {p['scan_period_s'] // 60} min: "
            f"scan Lambda {s['memory_mb']} MB / timeout {s['timeout_s']} s, ~{s['duration_s']:.1f} s, peak concurrency {s['concurrency_peak']}; "
            f"{p['findings_per_month'] / 1e6:,.0f} M findings/month; SQS {p['sqs_requests_per_s_avg']:,.0f} req/s avg; "
            f"DynamoDB {p['dynamodb_wru_per_s_avg']:,.0f} WRU/s avg, {p['dynamodb_wru_burst_per_s']:,.0f} WRU/s burst "
            f"({_units(p)}); "
            f"AWS ${p['total_usd_per_month']:,.0f}/month (Lambda ${c['lambda_compute'] + c['lambda_requests']:,.0f}, SQS ${c['sqs']:,.0f}, "
            f"DynamoDB ${c['dynamodb_writes'] + c['dynamodb_reads']:,.0f}) vs waste reported ${p['waste_reported_usd_per_month']:,.0f}/month")
