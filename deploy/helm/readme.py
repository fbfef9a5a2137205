"""Write the values table of deploy/helm/gpuwaste/README.md from the chart's values.yaml (one row per key documented
by a `# -- text` comment on the line before it: key, type, default, description), between the README's
`<!-- values:start -->` and `<!-- values:end -->` markers.

    python deploy/helm/readme.py          # rewrite the table
    python deploy/helm/readme.py --check  # exit 1 when it is out of date (tests/unit/test_helm_chart.py)
"""

from __future__ import annotations

import json
import re
import sys
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


def main(argv: list[str]) -> int:
    wanted = readme()
    if "--check" in argv:
        if (CHART / "README.md").read_text() != wanted:
            print(
                "deploy/helm/gpuwaste/README.md's values table is out of date: run python deploy/helm/readme.py",
                file=sys.stderr,
            )
            return 1
        return 0
    (CHART / "README.md").write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
