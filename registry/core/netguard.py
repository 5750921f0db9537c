"""The guard in front of every MCP server URL: which schemes, hosts and addresses may be reached.

More: docs/security.md, "Module notes".
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Names that always mean an internal address, whatever DNS says.
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_METADATA_NAMES = (
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "instance-data.ec2.internal",
)
_METADATA_ADDRESS = ipaddress.ip_address("169.254.169.254")


class UnsafeUrlError(ValueError):
    """The URL may not be used for an MCP server; the message says why, for an admin."""


def parse_networks(values: Iterable[str]) -> list[IPNetwork]:
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as exc:
            raise UnsafeUrlError(
                f"{value!r} in TOOLROOM_ALLOWED_NETWORKS is not a network"
            ) from exc
    return networks


def host_as_address(host: str) -> IPAddress | None:
    """The address a host string denotes by itself, or None for a name that needs DNS.

    Accepts the forms HTTP clients accept and attackers use to dodge naive checks: bracketed
    IPv6, and IPv4 written as one integer, in hex, in octal or with fewer than four parts.
    """
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if host and all(
        part and (part.isdigit() or part.lower().startswith("0x")) for part in host.split(".")
    ):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


# IPv6 forms that carry an IPv4 address, which a translator, relay or dual stack reaches:
# NAT64 (RFC 6052 well-known and local-use prefixes, the address in the last 32 bits),
# IPv4-translated (SIIT, RFC 2765: ::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d, deprecated but
# still routed by some stacks).
_NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# ISATAP (RFC 5214): any /64 prefix, then an interface identifier of 0000:5efe or 0200:5efe (the
# universal/local bit set) and the IPv4 address of the tunnel's end.
_ISATAP_INTERFACE_IDS = (0x00005EFE, 0x02005EFE)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, IPv4-translated, NAT64, 6to4,
    Teredo, ISATAP, IPv4-compatible), or None. The same rules apply to it as to the IPv4 address
    itself."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client, where the traffic ends up
    last_32_bits = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in prefix for prefix in _NAT64_PREFIXES) or address in _IPV4_TRANSLATED:
        return last_32_bits
    if (int(address) >> 32) & 0xFFFFFFFF in _ISATAP_INTERFACE_IDS:
        return last_32_bits
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: nor ::1
        return last_32_bits
    return None


def _effective(address: IPAddress) -> IPAddress:
    """What the address reaches: the embedded IPv4 address where there is one."""
    return embedded_ipv4(address) or address


def address_is_internal(address: IPAddress) -> bool:
    reached = _effective(address)
    if (
        isinstance(address, ipaddress.IPv6Address)
        and reached is not address
        and address.ipv4_mapped is None
        and not address.is_global
    ):
        # A non-global IPv6 wrapper (Teredo's 2001::/32) is internal whatever it carries.
        return True
    return (not reached.is_global) or reached.is_multicast


def address_allowed(address: IPAddress, allowed_networks: Iterable[IPNetwork]) -> bool:
    reached = _effective(address)
    if any(reached.version == net.version and reached in net for net in allowed_networks):
        return True
    return not address_is_internal(address)


def _describe(address: IPAddress) -> str:
    embedded = embedded_ipv4(address)
    if embedded is not None and address_is_internal(embedded):
        return f"an IPv6 form of {embedded}, {_describe(embedded)}"
    if address == _METADATA_ADDRESS:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if address.is_multicast:
        return "a multicast address"
    return "a reserved or non-global address"


def check_server_url(url: str, *, allowed_networks: Iterable[str]) -> str:
    """Return the URL if an MCP server may live there, else raise UnsafeUrlError."""
    networks = parse_networks(allowed_networks)
    if not url or url != url.strip() or any(ord(ch) < 0x21 for ch in url):
        raise UnsafeUrlError("The URL must not be empty or contain spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrlError(f"The URL is malformed: {exc}.") from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise UnsafeUrlError(
            f"Only http:// and https:// URLs can reach an MCP server, not {parts.scheme or 'no'}"
            " scheme."
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UnsafeUrlError(
            "The URL carries credentials; put them in the server's headers, which are "
            "encrypted at rest, not in the URL."
        )
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise UnsafeUrlError("The URL has no host.")
    if port == 0:
        raise UnsafeUrlError("The URL's port must be between 1 and 65535.")
    address = host_as_address(host)
    if address is None:
        if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
            address = ipaddress.ip_address("127.0.0.1")
        elif host in _METADATA_NAMES:
            address = _METADATA_ADDRESS
    if address is not None and not address_allowed(address, networks):
        raise UnsafeUrlError(
            f"The URL's host {host} is {_describe(address)}; such networks are refused unless "
            "TOOLROOM_ALLOWED_NETWORKS lists them."
        )
    return url


def resolved_address_refusal(
    address: str, *, allowed_networks: Iterable[IPNetwork] = ()
) -> str | None:
    """Why a resolved address may not be connected to ("a private address", "an IPv6 form of
    127.0.0.1, a loopback address"), or None when it may. The one rule for every address a name
    resolves to: the workers' MCP connections and the sandbox's egress proxy both ask it."""
    parsed = ipaddress.ip_address(address.split("%", 1)[0])
    if address_allowed(parsed, allowed_networks):
        return None
    return _describe(parsed)


def check_resolved_address(address: str, *, allowed_networks: Iterable[str]) -> None:
    """Raise UnsafeUrlError unless a resolved peer address may be connected to."""
    refusal = resolved_address_refusal(address, allowed_networks=parse_networks(allowed_networks))
    if refusal is not None:
        raise UnsafeUrlError(
            f"Refused to connect to {address}: {refusal}, not in TOOLROOM_ALLOWED_NETWORKS."
        )


def connectable_addresses(
    host: str, infos: Iterable[tuple[Any, ...]], *, allowed_networks: Iterable[str]
) -> list[str]:
    """The addresses one `getaddrinfo` of `host` gave, in order and without repeats, once every
    one of them passed the guard; UnsafeUrlError (naming the host) if any did not. A guarded
    connection connects only to these: no second lookup that DNS rebinding could turn."""
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    try:
        for address in addresses:
            check_resolved_address(address, allowed_networks=allowed_networks)
    except UnsafeUrlError as exc:
        raise UnsafeUrlError(f"{host}: {exc}") from exc
    return addresses
