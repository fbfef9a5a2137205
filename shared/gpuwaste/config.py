"""Config: the one validated configuration document (clusters, labels, thresholds, pricing, routing), composed of the
settings sections (`gpuwaste.models.settings`), the detectors' settings and the price overrides, and its loading.

Loaded from YAML/JSON (a file, an SSM parameter or an S3 object — the bootstrap fetches the text) and
validated once, then frozen; errors name the field path and what is allowed. `gpuwaste config-schema` prints the
JSON Schema exported from these models. Secrets are held as `SecretStr` or referenced by Secrets
Manager ARN, never logged. No adapter imports this module (it imports the detectors): adapters take their section.
"""

from __future__ import annotations

import difflib
import json
import re
from decimal import Decimal
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.errors import ConfigError, InputFormatError
from gpuwaste.models.settings import (
    ClusterConfig,
    DeliverySettings,
    LifecycleSettings,
    ReclaimSettings,
    ScanSettings,
    ServeSettings,
)
from gpuwaste.pricing.prices import PriceOverrides


class GpuWasteConfig(BaseModel):
    """The whole configuration document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clusters: list[ClusterConfig] = Field(default_factory=list)
    scan: ScanSettings = Field(default_factory=ScanSettings)
    detectors: DetectorSettings = Field(default_factory=DetectorSettings)
    pricing: PriceOverrides = Field(default_factory=PriceOverrides)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings)
    extra: dict[str, Any] = Field(default_factory=dict, description="free-form settings of later stages")

    @model_validator(mode="after")
    def _platform_owners(self) -> GpuWasteConfig:
        """Hand each cluster's `platform_owner` to delivery routing (`delivery.platform_owners`), which sees only the
        delivery settings."""
        for c in self.clusters:
            if c.platform_owner is not None:
                self.delivery.platform_owners.setdefault(c.name, c.platform_owner)
        return self

    def cluster(self, name: str) -> ClusterConfig:
        """The named cluster.

        Raises:
            ConfigError: when no cluster has that name.
        """
        for c in self.clusters:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.clusters) or "none"
        raise ConfigError(f"clusters: no cluster named {name!r} (configured: {known})")


def _unwrap_optional(tp: Any) -> Any:
    args = [a for a in get_args(tp) if a is not type(None)]
    return args[0] if get_origin(tp) in (Union, UnionType) and len(args) == 1 else tp


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings model that holds the (unknown) key at `loc[-1]`, walking lists, dicts and optionals; or None."""
    current: Any = model
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return current if last else None
            current = _unwrap_optional(field.annotation)
        elif get_origin(current) in (list, tuple) and isinstance(part, int):
            current = _unwrap_optional(get_args(current)[0])
        elif get_origin(current) is dict:
            current = _unwrap_optional(get_args(current)[1])
        else:
            return None
    return None


def _did_you_mean(root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    holder = _model_at(root, loc)
    if holder is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(holder.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(holder.model_fields)}"


def format_validation_error(exc: ValidationError, *, source: str = "config", model: type[BaseModel] | None = None) -> str:
    """One line per problem: `field.path: message (got: value)`; an unknown key names the closest allowed one."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(root)"
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got: {got!r})"
        hint = _did_you_mean(model, tuple(err["loc"])) if model is not None and err["type"] == "extra_forbidden" else ""
        lines.append(f"{source}: {path}: {err['msg']}{shown}{hint}")
    return "\n".join(lines)


def parse_config(text: str, *, source: str = "config") -> GpuWasteConfig:
    """Validate a YAML or JSON configuration document.

    The document is bounded before and after parsing: at most `MAX_CONFIG_BYTES`, `MAX_CONFIG_DEPTH` levels of
    nesting and `MAX_CONFIG_VALUES` values once YAML aliases are expanded (a "billion laughs" document), and no
    number beyond ±`MAX_CONFIG_NUMBER` (`1e999999999` is refused, not taken as "never").

    Raises:
        ConfigError: naming each bad field path and what is allowed.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: {len(text):,} characters; a configuration document is at most "
                          f"{MAX_CONFIG_BYTES:,}")
    try:
        data = _load_yaml(text, source) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML/JSON: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: nested more than {MAX_CONFIG_DEPTH} levels deep") from exc
    _check_bounds(data, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the document must be a mapping, got {type(data).__name__}")
    try:
        return GpuWasteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source, model=GpuWasteConfig)) from exc


#: An integer in the configuration has at most this many digits (±1e12 is the largest value any field takes; a
#: 5,000-digit integer would otherwise reach Python's int-conversion limit as a traceback).
MAX_CONFIG_INT_DIGITS = 40


class _ConfigLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses integers longer than `MAX_CONFIG_INT_DIGITS` digits before converting them."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = str(node.value).lstrip("+-").replace("_", "")
        if len(digits) > MAX_CONFIG_INT_DIGITS:
            raise ConfigError(f"line {node.start_mark.line + 1}: an integer of {len(digits):,} digits is out of range "
                              "(at most ±1e12)")
        value: int = super().construct_yaml_int(node)
        return value


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)


def _load_yaml(text: str, source: str) -> Any:
    """The YAML/JSON document, refusing a key repeated in one mapping (YAML would keep the last one silently).

    Raises:
        ConfigError: naming the repeated key's path and both lines, or an integer too long to be a setting.
        yaml.YAMLError: the text is not YAML.
    """
    loader = _ConfigLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, source)
        try:
            return loader.construct_document(node)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    finally:
        loader.dispose()


def _check_duplicate_keys(root: yaml.Node, source: str) -> None:
    """Walk the node graph once (aliases visited once: no expansion) and refuse a mapping that repeats a key.

    Raises:
        ConfigError: `source: path.to.key: duplicate key (lines A and B); keep one`.
    """
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else f"<{key.tag}>"
                where = f"{path}.{name}" if path else name
                line = key.start_mark.line + 1
                if isinstance(key, yaml.ScalarNode) and name != "<<":
                    if name in first:
                        raise ConfigError(f"{source}: {where}: duplicate key (lines {first[name]} and {line}); keep one")
                    first[name] = line
                stack.append((value, where))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node.value))


#: Bounds on a configuration document (see `parse_config`).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_NUMBER = Decimal(10) ** 12
_NUMBER_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def _check_bounds(data: Any, source: str) -> None:
    """Refuse nesting deeper than `MAX_CONFIG_DEPTH`, more than `MAX_CONFIG_VALUES` values, and numbers (or numeric
    strings) beyond ±`MAX_CONFIG_NUMBER`, infinite or NaN.

    Raises:
        ConfigError: naming the path of the offending value.
    """
    budget = [MAX_CONFIG_VALUES]
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigError(f"{source}: more than {MAX_CONFIG_VALUES:,} values (YAML aliases expanded?)")
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{source}: {path or '(root)'}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        where = path or "(root)"
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float) or (isinstance(value, str) and _NUMBER_TEXT.match(value)):
            try:
                number = Decimal(str(value).strip())
            except ArithmeticError:
                continue
            if not number.is_finite() or (number != 0 and number.adjusted() >= MAX_CONFIG_NUMBER.adjusted() + 1):
                raise ConfigError(f"{source}: {where}: {str(value)[:40]} is out of range (at most ±1e12)")


def load_config(path: Path | None) -> GpuWasteConfig:
    """Read and validate the configuration file (defaults when `path` is None).

    Raises:
        ConfigError: when the file cannot be read or is invalid.
    """
    if path is None:
        return GpuWasteConfig()
    raw = read_config_bytes(Path(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_config(text, source=str(path))


def read_config_bytes(path: Path) -> bytes:
    """The configuration file's bytes: a regular file of at most `MAX_CONFIG_BYTES` (checked before it is read).

    Raises:
        ConfigError: a FIFO, device or directory, unreadable, or larger than the limit.
    """
    from gpuwaste.files import read_capped

    try:
        return read_capped(path, MAX_CONFIG_BYTES, what="configuration")
    except InputFormatError as exc:
        raise ConfigError(str(exc)) from exc


def config_json_schema() -> str:
    """The JSON Schema of the configuration document, as JSON text."""
    return json.dumps(GpuWasteConfig.model_json_schema(), indent=2, sort_keys=True)
