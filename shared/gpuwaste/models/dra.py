"""Models: Dynamic Resource Allocation objects (`resource.k8s.io`) as the scan needs them.

ResourceClaims say which devices a pod holds (`status.allocation.devices.results`: driver, pool, device),
ResourceSlices say what those devices are (pool/device → GPU UUID, MIG profile, parent GPU), DeviceClasses
name the kinds of device (`gpu.nvidia.com`, `mig.nvidia.com`). Built from `resource.k8s.io/v1` JSON (v1beta1
and v1beta2 are read the same way) by `sources.k8s_objects`; never holds SDK types (field guide B25).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from gpuwaste.models.base import Frozen


class PodClaimRef(Frozen):
    """One `spec.resourceClaims[]` entry of a pod, with the claim it resolved to.

    Attributes:
        name: the entry's name, referenced by containers' `resources.claims[].name`.
        claim_name: the ResourceClaim in the pod's namespace: `resourceClaimName`, or for a claim made from
            `resourceClaimTemplateName` the generated name in `status.resourceClaimStatuses[]`; None while
            the template's claim was not created yet.
        template: the ResourceClaimTemplate name when the claim is generated from one.
    """

    name: str
    claim_name: str | None = None
    template: str | None = None


class ClaimDeviceResult(Frozen):
    """One `status.allocation.devices.results[]` entry: a device allocated to the claim.

    Attributes:
        request: the claim's request this device satisfies.
        driver, pool, device: the device's identity in the ResourceSlices of `driver`.
        share_id: set when the device is allocated as a shared (consumable-capacity) device.
    """

    request: str = ""
    driver: str
    pool: str
    device: str
    share_id: str | None = None


class ConsumerRef(Frozen):
    """One `status.reservedFor[]` entry (the pods allowed to use the claim)."""

    resource: str = "pods"
    name: str
    uid: str = ""


class ResourceClaim(Frozen):
    """A ResourceClaim and its allocation.

    Attributes:
        device_classes: the device class names its requests ask for (`exactly.deviceClassName` in v1,
            `deviceClassName` in v1beta1, and every `firstAvailable[].deviceClassName`).
        results: allocated devices (empty while unallocated).
        reserved_for: consumers the scheduler reserved the claim for (pods sharing the claim).
        allocated_at: `status.allocation.allocationTimestamp` when the API server sets it.
    """

    namespace: str
    name: str
    uid: str = ""
    api_version: str = "resource.k8s.io/v1"
    device_classes: tuple[str, ...] = ()
    results: tuple[ClaimDeviceResult, ...] = ()
    reserved_for: tuple[ConsumerRef, ...] = ()
    created_at: datetime | None = None
    allocated_at: datetime | None = None
    deletion_requested: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return (self.namespace, self.name)

    @property
    def allocated(self) -> bool:
        """True when the scheduler allocated devices to the claim."""
        return bool(self.results)


class SliceDevice(Frozen):
    """One device a ResourceSlice publishes.

    Attributes:
        name: the device name in the pool ("gpu-0", "gpu-0-mig-1g10gb-0").
        attributes: the device's attributes flattened to strings (`{"uuid": {"string": "GPU-…"}}` → "GPU-…").
    """

    name: str
    attributes: dict[str, str] = Field(default_factory=dict)

    @property
    def uuid(self) -> str | None:
        """The device's UUID (`GPU-…` for a GPU, `MIG-…` for a MIG device), when published."""
        return self.attributes.get("uuid") or None

    @property
    def kind(self) -> str:
        """"gpu", "mig", or what the driver's `type` attribute says ("" when absent)."""
        return self.attributes.get("type", "")

    @property
    def parent_uuid(self) -> str | None:
        """For a MIG device: the UUID of the physical GPU it is carved from."""
        return self.attributes.get("parentUUID") or self.attributes.get("parentUuid") or None

    @property
    def physical_uuid(self) -> str | None:
        """The physical GPU this device is (or is part of)."""
        return self.parent_uuid if self.kind == "mig" else self.uuid

    @property
    def mig_profile(self) -> str | None:
        """For a MIG device: its profile ("1g.10gb", "1g.24gb+gfx")."""
        return self.attributes.get("profile") or None

    @property
    def product_name(self) -> str | None:
        """The GPU model as the driver publishes it (`productName`)."""
        return self.attributes.get("productName") or None


class ResourceSlice(Frozen):
    """A ResourceSlice: the devices one driver publishes for one pool (usually one node)."""

    name: str
    driver: str
    pool: str
    node_name: str | None = None
    devices: tuple[SliceDevice, ...] = ()


class DeviceClass(Frozen):
    """A DeviceClass: its name and the drivers its CEL selectors name (`device.driver == "gpu.nvidia.com"`)."""

    name: str
    drivers: tuple[str, ...] = ()
    expressions: tuple[str, ...] = ()


class DraDeviceLabels(Frozen):
    """The `dra_*` labels dcgm-exporter puts on a series of a device allocated through a claim (B25)."""

    claim_namespace: str | None = None
    claim_name: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
