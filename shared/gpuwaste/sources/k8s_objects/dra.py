"""Dynamic Resource Allocation objects: ResourceClaim, ResourceSlice and DeviceClass → the DRA models.

Every version the API serves (v1, v1beta1, v1beta2) is read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.models.dra import (
    ClaimDeviceResult,
    ConsumerRef,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    SliceDevice,
)
from gpuwaste.sources.k8s_objects.fields import _meta, _ts


def _attr_value(raw: Any) -> str | None:
    """A DRA device attribute (`{"string": "GPU-…"}`, `{"int": 0}`, `{"version": "12.4.0"}`, `{"bool": true}`) as text."""
    if not isinstance(raw, Mapping):
        return None if raw is None else str(raw)
    for key in ("string", "int", "version", "bool"):
        if key in raw and raw[key] is not None:
            value = raw[key]
            return ("true" if value else "false") if isinstance(value, bool) else str(value)
    return None


def resource_claim_from_dict(obj: Mapping[str, Any]) -> ResourceClaim:
    """Build a `ResourceClaim` from `resource.k8s.io/v1` JSON (v1beta1/v1beta2 tolerated).

    Raises:
        InputFormatError: when metadata.name is missing, an allocation result lacks driver/pool/device, or a
            time is malformed.
    """
    meta = _meta(obj, "ResourceClaim")
    ns = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    where = f"ResourceClaim {ns}/{name}"
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    classes: list[str] = []
    for req in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(req, Mapping):
            continue
        exact = req.get("exactly")
        exactly = exact if isinstance(exact, Mapping) else req  # v1 / v1beta1
        if exactly.get("deviceClassName"):
            classes.append(str(exactly["deviceClassName"]))
        for sub in req.get("firstAvailable") or []:
            if isinstance(sub, Mapping) and sub.get("deviceClassName"):
                classes.append(str(sub["deviceClassName"]))
    allocation = status.get("allocation") or {}
    results: list[ClaimDeviceResult] = []
    for i, r in enumerate((allocation.get("devices") or {}).get("results") or []):
        if not isinstance(r, Mapping) or not all(r.get(k) for k in ("driver", "pool", "device")):
            raise InputFormatError(f"{where}.status.allocation.devices.results[{i}]: needs driver, pool and device")
        results.append(
            ClaimDeviceResult(
                request=str(r.get("request", "")),
                driver=str(r["driver"]),
                pool=str(r["pool"]),
                device=str(r["device"]),
                share_id=str(r["shareID"]) if r.get("shareID") else None,
            )
        )
    reserved = tuple(
        ConsumerRef(resource=str(c.get("resource", "pods")), name=str(c["name"]), uid=str(c.get("uid", "")))
        for c in status.get("reservedFor") or []
        if isinstance(c, Mapping) and c.get("name")
    )
    return ResourceClaim(
        namespace=ns,
        name=name,
        uid=str(meta.get("uid", "")),
        api_version=str(obj.get("apiVersion") or "resource.k8s.io/v1"),
        device_classes=tuple(dict.fromkeys(classes)),
        results=tuple(results),
        reserved_for=reserved,
        created_at=_ts(meta.get("creationTimestamp"), f"{where}.metadata.creationTimestamp"),
        allocated_at=_ts(allocation.get("allocationTimestamp"), f"{where}.status.allocation.allocationTimestamp"),
        deletion_requested=bool(meta.get("deletionTimestamp")),
    )


def resource_slice_from_dict(obj: Mapping[str, Any]) -> ResourceSlice:
    """Build a `ResourceSlice` from `resource.k8s.io/v1` JSON (v1beta1's `devices[].basic` tolerated).

    Attribute names are kept without their domain (`gpu.nvidia.com/uuid` → `uuid`).

    Raises:
        InputFormatError: when metadata.name, spec.driver or spec.pool.name is missing.
    """
    meta = _meta(obj, "ResourceSlice")
    name = str(meta["name"])
    spec = obj.get("spec") or {}
    pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), Mapping) else None
    if not spec.get("driver") or not pool:
        raise InputFormatError(f"ResourceSlice {name}: spec.driver and spec.pool.name are required")
    devices: list[SliceDevice] = []
    for d in spec.get("devices") or []:
        if not isinstance(d, Mapping) or not d.get("name"):
            continue
        basic = d.get("basic")
        body = basic if isinstance(basic, Mapping) else d  # v1beta1 wraps attributes in `basic`
        attrs: dict[str, str] = {}
        for key, raw in (body.get("attributes") or {}).items():
            value = _attr_value(raw)
            if value is not None:
                attrs[str(key).rsplit("/", 1)[-1]] = value
        devices.append(SliceDevice(name=str(d["name"]), attributes=attrs))
    return ResourceSlice(name=name, driver=str(spec["driver"]), pool=str(pool), node_name=spec.get("nodeName") or None, devices=tuple(devices))


_CEL_DRIVER = re.compile(r"device\.driver\s*==\s*['\"](?P<driver>[^'\"]+)['\"]")


def device_class_from_dict(obj: Mapping[str, Any]) -> DeviceClass:
    """Build a `DeviceClass` (its name, and the drivers its CEL selectors compare `device.driver` with).

    Raises:
        InputFormatError: when metadata.name is missing.
    """
    meta = _meta(obj, "DeviceClass")
    expressions = tuple(
        str(((s or {}).get("cel") or {}).get("expression", ""))
        for s in (obj.get("spec") or {}).get("selectors") or []
        if isinstance(s, Mapping)
    )
    drivers = tuple(dict.fromkeys(m.group("driver") for e in expressions for m in _CEL_DRIVER.finditer(e)))
    return DeviceClass(name=str(meta["name"]), drivers=drivers, expressions=expressions)
