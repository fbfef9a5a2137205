"""Benchmark: CLI start-up — `gpuwaste --help` and a scan of the bundled demo recording, wall time per run.

Targets (issue 13 §5): `gpuwaste --help` ≤ 0.5 s and `gpuwaste scan -r <demo>` ≤ 1.5 s wall on the
development machine. Each command runs `RUNS` times in a fresh process (the median and the worst are
printed; the first run also pays for a cold page cache). The evidence that heavy libraries stay out of
start-up comes from `python -X importtime`: the modules each command imports, the slowest ones, and
whether any heavy library (boto3, kubernetes, matplotlib, slack-sdk, prometheus_api_client, requests)
is among them.

Run: `PYTHONPATH=shared:. .venv/bin/python bench/startup.py` (prints a table; exit 1 when a target is missed).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "shared" / "gpuwaste" / "fleet" / "demo"
RUNS = 7
HEAVY = ("boto3", "botocore", "kubernetes", "matplotlib", "slack_sdk", "prometheus_api_client", "requests")
TARGETS_S = {"--help": 0.5, "scan demo": 1.5}
COMMANDS = {
    "--help": ["--help"],
    "scan demo": ["scan", "-r", str(DEMO), "-q"],
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT / 'shared'}{os.pathsep}{ROOT}"
    env["COLUMNS"] = "80"
    return env


def _argv(args: list[str], *, importtime: bool = False) -> list[str]:
    flags = ["-X", "importtime"] if importtime else []
    return [sys.executable, *flags, "-c", "import sys; from gpuwaste.cli import run; sys.argv[0] = 'gpuwaste'; run()", *args]


def wall(args: list[str]) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds user+sys) of RUNS fresh processes running `gpuwaste ARGS`.

    The CPU time barely depends on what else runs on the machine; the wall time does (the target is wall time).
    """
    times, cpu = [], []
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(_argv(args), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return times, cpu


def imports(args: list[str]) -> tuple[list[tuple[int, str]], set[str]]:
    """(the 5 slowest top-level imports as (cumulative µs, module), every module imported) from -X importtime."""
    done = subprocess.run(_argv(args, importtime=True), env=_env(), capture_output=True, text=True, check=False)
    rows: list[tuple[int, str, int]] = []
    modules: set[str] = set()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        depth = (len(name) - len(name.lstrip())) // 2
        modules.add(name.strip())
        rows.append((int(cumulative), name.strip(), depth))
    top = sorted(((c, n) for c, n, d in rows if d == 0), reverse=True)[:5]
    return top, modules


def main() -> int:
    """Print the start-up table; exit 1 when a target is missed."""
    load = os.getloadavg()[0]
    print(f"gpuwaste start-up, {RUNS} runs each, {os.cpu_count()} CPUs, load average {load:.2f}, Python {sys.version.split()[0]}")
    print(f"{'command':12} {'median s':>9} {'worst s':>8} {'CPU s':>6} {'target s':>9}  verdict  heavy libraries imported")
    missed = False
    details = []
    for name, args in COMMANDS.items():
        times, cpu = wall(args)
        top, modules = imports(args)
        heavy = sorted({m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY})
        median = statistics.median(times)
        ok = median <= TARGETS_S[name]
        missed |= not ok
        print(f"{name:12} {median:9.3f} {max(times):8.3f} {statistics.median(cpu):6.3f} {TARGETS_S[name]:9.1f}  "
              f"{'met' if ok else 'MISSED':7}  "
              f"{', '.join(heavy) or 'none'}")
        details.append((name, top, len(modules)))
    for name, top, count in details:
        print(f"-X importtime, {name}: {count} modules; slowest top-level imports (cumulative ms): "
              + ", ".join(f"{n} {c / 1000:.0f}" for c, n in top))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
