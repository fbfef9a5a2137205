"""Settings: what every settings section shares — the outbound-URL check (SSRF), secrets, common bounds.

Pure pydantic (no SDK, no detector): the adapters import their sections from `gpuwaste.models.settings`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from decimal import Decimal
from typing import Annotated, Protocol
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr

from gpuwaste.models.redaction import register_secret

#: The largest USD/day a threshold may be set to (a million dollars a day; "never" is not a number).
MAX_USD_PER_DAY = Decimal(1_000_000)

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")


#: Host names of cloud instance-metadata services (credentials live there): refused as a destination unless the
#: section allows link-local URLs. Their addresses (169.254.169.254, fd00:ec2::254, …) are refused as link-local.
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.internal", "metadata.tencentyun.com"})
#: Metadata services outside the link-local ranges (Alibaba Cloud, Oracle Cloud's legacy address).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("192.0.0.192"),
                                ipaddress.ip_address("fd00:ec2::254")})


def _host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address, also in the forms C's inet_aton reads (`2852039166`, `0xa9fea9fe`, `0251.0376…`);
    None for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[0-9a-fA-FxX.]+", host) or not re.search(r"\d", host):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def outbound_url_problem(url: str, *, allow_link_local: bool = False, secret: bool = False) -> str | None:
    """Why `url` may not be a destination gpuwaste sends to or links to; None when it may.

    Refused: a scheme other than http/https (`file://`, `gopher://`, `javascript:`), no host, and — unless
    `allow_link_local` — link-local hosts (169.254.0.0/16, fe80::/10, in any notation) and cloud metadata services
    (METADATA_HOSTS, METADATA_ADDRESSES), the usual server-side request forgery targets. Loopback and private
    networks (a Prometheus in the cluster, a local test server) are allowed. With `secret` the reason does not
    name the host. A host given as `{placeholder}` (a link template) is not checked.
    """
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if not host:
        return "the URL has no host"
    if allow_link_local or "{" in host:
        return None
    address = _host_address(host)
    metadata = host in METADATA_HOSTS or address in METADATA_ADDRESSES or str(address) == "169.254.169.254"
    if metadata or (address is not None and address.is_link_local):
        what = "a cloud metadata service" if metadata else "a link-local address"
        return (f"host {'(hidden: the URL is a secret)' if secret else host} is {what}; set "
                f"allow_link_local_urls: true in this section if it is really meant")
    return None


class UrlSection(Protocol):
    """A settings section with outbound URLs: it declares its opt-in to link-local destinations (`ALLOW_LINK_LOCAL`)."""

    @property
    def allow_link_local_urls(self) -> bool:
        """Whether this section's URLs may point at link-local addresses or cloud metadata services."""
        ...


def _check_urls(section: UrlSection, urls: dict[str, str | None], *, secret: bool = False) -> None:
    """Raise ValueError naming the first field of `urls` (field path → URL) that `outbound_url_problem` refuses."""
    allow = section.allow_link_local_urls
    for where, url in urls.items():
        if url is None:
            continue
        problem = outbound_url_problem(url, allow_link_local=allow, secret=secret)
        if problem:
            raise ValueError(f"{where}: {problem}")


def _remember_secret(value: SecretStr) -> SecretStr:
    register_secret(value.get_secret_value())  # redacted from every log line from now on (models/redaction.py)
    return value


#: A secret in the configuration: masked in repr/JSON (SecretStr) and redacted literally from every log line.
Secret = Annotated[SecretStr, AfterValidator(_remember_secret)]
#: Opt-in per section for link-local / metadata-service destinations (refused by default: SSRF).
ALLOW_LINK_LOCAL = Field(False, description="allow this section's URLs to point at link-local addresses or cloud "
                                             "metadata services (169.254.0.0/16, fd00:ec2::254, "
                                             "metadata.google.internal…), refused by default")
