"""Issue 11, item 11: IPv6 forms of internal IPv4 addresses (NAT64, 6to4, IPv4-compatible,
Teredo, IPv4-mapped) are refused like the IPv4 address itself, at registration and at connect
time; their global counterparts stay allowed.

Issue 26: the IPv4-translated form (::ffff:0:a.b.c.d) and ISATAP (...:5efe:a.b.c.d) likewise
(Low 5); and the sandbox's egress proxy refuses an allowlisted name that resolves to any address
the guard refuses, through the same function (Medium 4), tested once for both below.
"""

from __future__ import annotations

import asyncio
import ipaddress

import httpcore2
import pytest

from registry.core.netguard import (
    UnsafeUrlError,
    check_resolved_address,
    check_server_url,
    embedded_ipv4,
    resolved_address_refusal,
)
from registry.servers import services
from registry.servers.models import McpServer, Transport
from workers.adapters.guarded_http import GuardedBackend
from workers.adapters.sandbox.egress_proxy import Allowlist, Proxy, start_server

METADATA_FORMS = [
    "64:ff9b::a9fe:a9fe",  # NAT64 well-known prefix
    "64:ff9b:1::a9fe:a9fe",  # NAT64 local-use prefix
    "2002:a9fe:a9fe::1",  # 6to4
    "::a9fe:a9fe",  # IPv4-compatible
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::ffff:0:a9fe:a9fe",  # IPv4-translated (SIIT)
    "2600::5efe:a9fe:a9fe",  # ISATAP under a global prefix
    "2600::200:5efe:a9fe:a9fe",  # ISATAP, universal/local bit set
]
PRIVATE_FORMS = [
    "64:ff9b::a00:1",
    "2002:a00:1::",
    "::10.0.0.1",
    "64:ff9b::7f00:1",
    "::ffff:0:7f00:1",
    "::ffff:0:a00:5",
    "2600::5efe:7f00:1",
    "2600::5efe:a00:5",
]
GLOBAL_FORMS = [
    "64:ff9b::808:808",
    "2002:808:808::",
    "::8.8.8.8",
    "::ffff:0:808:808",
    "2600::5efe:808:808",
]


@pytest.mark.parametrize("address", METADATA_FORMS + PRIVATE_FORMS)
def test_registration_refuses_ipv6_forms_of_internal_ipv4(address):
    with pytest.raises(UnsafeUrlError, match="IPv6 form of"):
        check_server_url(f"http://[{address}]/mcp", allowed_networks=[])


@pytest.mark.parametrize("address", GLOBAL_FORMS)
def test_ipv6_forms_of_global_ipv4_stay_allowed(address):
    check_server_url(f"http://[{address}]/mcp", allowed_networks=[])
    check_resolved_address(address, allowed_networks=[])


@pytest.mark.parametrize("address", METADATA_FORMS + PRIVATE_FORMS)
def test_connect_time_refuses_ipv6_forms_of_internal_ipv4(address):
    with pytest.raises(UnsafeUrlError):
        check_resolved_address(address, allowed_networks=[])


def test_an_allowed_ipv4_network_covers_its_ipv6_forms():
    check_server_url("http://[64:ff9b::7f00:1]:9000/mcp", allowed_networks=["127.0.0.0/8"])


def test_embedded_ipv4_is_decoded():
    assert str(embedded_ipv4(ipaddress.ip_address("2002:a9fe:a9fe::"))) == "169.254.169.254"


@pytest.mark.anyio
@pytest.mark.parametrize("address", ["64:ff9b::a9fe:a9fe", "2002:a00:1::"])
async def test_the_workers_connection_is_refused_before_any_packet(address):
    backend = GuardedBackend(allowed_networks=[])
    with pytest.raises(httpcore2.ConnectError, match="IPv6 form of"):
        await backend.connect_tcp(address, 80, timeout=5)


@pytest.mark.django_db
def test_a_server_with_such_a_url_cannot_be_registered(alice):
    from registry.core.errors import ApplicationError

    with pytest.raises(ApplicationError, match="IPv6 form of"):
        services.server_create(
            actor=alice,
            slug="meta",
            name="Meta",
            transport=Transport.STREAMABLE_HTTP,
            url="http://[64:ff9b::a9fe:a9fe]/mcp",
        )
    assert not McpServer.objects.exists()


def test_isatap_and_ipv4_translated_addresses_are_decoded():
    assert str(embedded_ipv4(ipaddress.ip_address("::ffff:0:7f00:1"))) == "127.0.0.1"
    assert str(embedded_ipv4(ipaddress.ip_address("2600::5efe:a00:5"))) == "10.0.0.5"
    assert embedded_ipv4(ipaddress.ip_address("2600::1:5eff:a00:5")) is None


# Every address a name may not lead to: the review's (the proxy let each through), the forms above,
# and the plain internal ones.
INTERNAL_ADDRESSES = [
    "10.0.0.5",
    "172.17.0.1",  # the Docker host
    "fd00::1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1",
    "127.0.0.1",
    "::1",
    "169.254.169.254",
    "0.0.0.0",  # noqa: S104 - an address to refuse, not one to bind
    "224.0.0.1",
    "fe80::1",
    *METADATA_FORMS,
    *PRIVATE_FORMS,
]


async def _through_the_egress_proxy(address: str) -> bytes:
    """CONNECT to an allowlisted name that resolves to `address`. The resolver is a stub: no DNS
    server here can be told to answer these addresses, and the lookup is not what is tested."""

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "api.example.test"
        return [address]

    proxy = Proxy(Allowlist.parse(["api.example.test:443"]), resolver=resolver, log=lambda _: None)
    server = await start_server(proxy, "127.0.0.1", 0)
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        writer.write(b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
    return reply


@pytest.mark.anyio
@pytest.mark.parametrize("address", INTERNAL_ADDRESSES)
async def test_the_url_guard_and_the_egress_proxy_refuse_every_internal_address(address):
    why = resolved_address_refusal(address)
    assert why is not None
    with pytest.raises(UnsafeUrlError):  # the workers' connections
        check_resolved_address(address, allowed_networks=[])
    reply = await _through_the_egress_proxy(address)  # the sandbox's egress proxy
    assert reply.startswith(b"HTTP/1.1 403")
    assert f"resolves to {address} ({why})".encode() in reply


@pytest.mark.anyio
@pytest.mark.parametrize("address", ["8.8.8.8", "2600::1", *GLOBAL_FORMS])
async def test_a_global_address_passes_both(address):
    assert resolved_address_refusal(address) is None
    check_resolved_address(address, allowed_networks=[])
    reply = await _through_the_egress_proxy(address)
    assert b"which no listed name may reach" not in reply
