"""Write the values table of deploy/helm/gpuwaste/README.md from the chart's values.yaml (one row per key documented
by a `# -- text` comment on the line before it: key, type, default, description), between the README's
`<!-- values:start -->` and `<!-- values:end -->` markers; and Chart.yaml's `home` and `sources` from the project's
one home, pyproject.toml [project.urls] Homepage (a placeholder for now).

    python deploy/helm/readme.py          # rewrite the table and Chart.yaml's home
    python deploy/helm/readme.py --check  # exit 1 when it is out of date (tests/unit/test_helm_chart.py)
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "gpuwaste"
START, END = "<!-- values:start -->", "<!-- values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):")


def documented(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) of each `# -- text` comment and the key on the line after it, in file order."""
    rows: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = stripped.removeprefix("# --").strip()
            continue
        m = _KEY.match(line)
        if not m:
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group("key")))
        if pending is not None:
            rows.append((".".join(k for _, k in stack), pending))
            pending = None
    return rows


def _value(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        node = node[key]
    return node


def _type(v: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}.get(type(v), "null")


def table() -> str:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, description in documented(text):
        v = _value(values, key)
        default = json.dumps(v, separators=(", ", ": ")).replace("|", "\\|")
        text_ = description.replace("|", "\\|")
        lines.append(f"| `{key}` | {_type(v)} | `{default}` | {text_} |")
    return "\n".join(lines)


def readme() -> str:
    current = (CHART / "README.md").read_text()
    head, _, rest = current.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


HOME_NOTE = "# home, sources: pyproject.toml [project.urls] Homepage (deploy/helm/readme.py); a placeholder (README.md)"


def chart_yaml() -> str:
    """Chart.yaml with `home` and `sources` set to the project's home (and the line saying where it comes from)."""
    home = tomllib.loads((CHART.parents[2] / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
    lines = [line for line in (CHART / "Chart.yaml").read_text().splitlines() if line != HOME_NOTE]
    out: list[str] = []
    for line in lines:
        if line.startswith("home:"):
            out += [HOME_NOTE, f"home: {home}"]
        elif line.startswith("sources:"):
            out.append(f"sources: [{home}]")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    wanted = {"README.md": readme(), "Chart.yaml": chart_yaml()}
    stale = [name for name, text in wanted.items() if (CHART / name).read_text() != text]
    if "--check" in argv:
        if stale:
            print(
                f"deploy/helm/gpuwaste/{' and '.join(stale)} out of date (the values table; the project's home from "
                "pyproject.toml): run python deploy/helm/readme.py",
                file=sys.stderr,
            )
            return 1
        return 0
    for name in stale:
        (CHART / name).write_text(wanted[name])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
