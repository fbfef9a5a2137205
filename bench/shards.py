"""Benchmark (issue 23 item 7a): one cluster scanned whole and as N shards against the same Prometheus data.

Run: `PYTHONPATH=shared:. .venv/bin/python -m bench.shards [--gpus 10004] [--shards 4]`. The fleet is the bench's
(`bench.run.make_fleet`, generated and promtool-backfilled once into `bench/.cache`, shared with `make bench`), the
cluster state comes from the fake kube-apiserver, and every scan runs in its own process (`bench/scan_once.py`,
its peak RSS its own). Prints whether the shards' findings together equal the whole scan's (fingerprint, kind,
GPU-hours, dollars, money owner — byte for byte), and each scan's wall, CPU and peak memory: the wall of the slowest
shard is what a sharded scan takes when its shards run side by side (one Lambda each).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.run import ROOT, kube_objects, log, make_fleet, prepared_data, prometheus, scan_child
from tests.servers.kube_api import FakeKubeApi, write_kubeconfig


def compare(whole: dict[str, Any], shards: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the shards' findings together are the whole scan's, and the figures side by side."""
    keys = sorted(k for s in shards for k in s["finding_keys"])
    fingerprints = [k[0] for k in keys]
    return {
        "same_findings": keys == whole["finding_keys"],
        "duplicate_fingerprints": len(fingerprints) - len(set(fingerprints)),
        "findings": [whole["findings"], sum(s["findings"] for s in shards)],
        "usd_per_day": [round(whole["usd_per_day"], 2), round(sum(s["usd_per_day"] for s in shards), 2)],
        "gpus": [whole["physical_gpus"], sum(s["physical_gpus"] for s in shards)],
        "whole": {k: whole[k] for k in ("wall_s", "cpu_s", "peak_rss_mb")},
        "shards": [{k: s[k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "physical_gpus", "findings")} for s in shards],
        "slowest_shard_wall_s": max(s["wall_s"] for s in shards),
        "largest_shard_peak_mb": max(s["peak_rss_mb"] for s in shards),
    }


def run(gpus: int, shard_count: int, cache: Path) -> dict[str, Any]:
    """Scan the bench fleet of `gpus` GPUs whole, then as `shard_count` shards, against one Prometheus; the comparison."""
    fleet = make_fleet(gpus, "full")
    entry = prepared_data(fleet, gpus, "full", cache)
    with tempfile.TemporaryDirectory(prefix="gpuwaste-shards-") as tmp:
        work = Path(tmp)
        shutil.copytree(entry.data, work / "data")  # Prometheus writes into its data dir: the cached copy stays pristine
        objects = kube_objects(fleet)
        kube = FakeKubeApi(pods=objects.pop("pods", []), nodes=objects.pop("nodes", []), others=objects).start()
        kube._httpd.RequestHandlerClass.disable_nagle_algorithm = True  # type: ignore[union-attr]
        kubeconfig = write_kubeconfig(work / "kubeconfig", kube.url)
        try:
            with prometheus(work / "data") as (url, _proc, _ready):
                scan_child(url, kubeconfig, fleet.spec.cluster)  # warm Prometheus's page cache up
                whole = scan_child(url, kubeconfig, fleet.spec.cluster, extra={"dump_keys": True})
                log(f"whole: {whole['findings']} findings, {whole['wall_s']:.1f} s, {whole['peak_rss_mb']:.0f} MB")
                shards = []
                for k in range(shard_count):
                    shards.append(scan_child(url, kubeconfig, fleet.spec.cluster,
                                             extra={"dump_keys": True, "shard": k, "shard_count": shard_count}))
                    log(f"shard {k}: {shards[-1]['findings']} findings, {shards[-1]['physical_gpus']} GPUs, "
                        f"{shards[-1]['wall_s']:.1f} s, {shards[-1]['peak_rss_mb']:.0f} MB")
        finally:
            kube.stop()
    return {"target_gpus": gpus, "shard_count": shard_count,
            "load_average": os.getloadavg(), **compare(whole, shards)}


def summary_line(r: dict[str, Any]) -> str:
    """What `make bench` prints for item 7(a)."""
    walls = ", ".join(f"{s['wall_s']:.2f}" for s in r["shards"])
    gpus = ", ".join(f"{s['physical_gpus']:,}" for s in r["shards"])
    return (f"{r['gpus'][0]:,} GPUs scanned whole and as {r['shard_count']} shards (same Prometheus data): "
            f"same findings, fingerprints, GPU-hours and dollars: {'yes' if r['same_findings'] else 'NO'}; "
            f"duplicate fingerprints {r['duplicate_fingerprints']}; GPUs {r['gpus'][0]:,} / {r['gpus'][1]:,}; findings {r['findings'][0]:,} / {r['findings'][1]:,}; "
            f"USD/day {r['usd_per_day'][0]:,.2f} / {r['usd_per_day'][1]:,.2f}; whole scan {r['whole']['wall_s']:.2f} s, "
            f"{r['whole']['peak_rss_mb']:.0f} MB; shards' GPUs {gpus}; shard walls {walls} s: slowest "
            f"{r['slowest_shard_wall_s']:.2f} s, largest peak {r['largest_shard_peak_mb']:.0f} MB "
            f"(load {r['load_average'][0]:.1f})")


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.shards`: the comparison as JSON; exit 1 when the shards' findings differ from the whole's."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_004)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--cache", type=Path, default=ROOT / "bench" / ".cache")
    args = ap.parse_args(argv)
    result = run(args.gpus, args.shards, args.cache)
    sys.stdout.write(json.dumps(result, indent=1) + "\n")
    sys.stderr.write(summary_line(result) + "\n")
    return 0 if result["same_findings"] and not result["duplicate_fingerprints"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
