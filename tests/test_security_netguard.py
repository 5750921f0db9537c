"""Issue 11, item 11: IPv6 forms of internal IPv4 addresses (NAT64, 6to4, IPv4-compatible,
Teredo, IPv4-mapped) are refused like the IPv4 address itself, at registration and at connect
time; their global counterparts stay allowed."""

from __future__ import annotations

import ipaddress

import httpcore2
import pytest

from registry.core.netguard import (
    UnsafeUrlError,
    check_resolved_address,
    check_server_url,
    embedded_ipv4,
)
from registry.servers import services
from registry.servers.models import McpServer, Transport
from workers.adapters.mcp_client import _GuardedBackend

METADATA_FORMS = [
    "64:ff9b::a9fe:a9fe",  # NAT64 well-known prefix
    "64:ff9b:1::a9fe:a9fe",  # NAT64 local-use prefix
    "2002:a9fe:a9fe::1",  # 6to4
    "::a9fe:a9fe",  # IPv4-compatible
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254
    "::ffff:169.254.169.254",  # IPv4-mapped
]
PRIVATE_FORMS = ["64:ff9b::a00:1", "2002:a00:1::", "::10.0.0.1", "64:ff9b::7f00:1"]
GLOBAL_FORMS = ["64:ff9b::808:808", "2002:808:808::", "::8.8.8.8"]


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
    backend = _GuardedBackend(allowed_networks=[])
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
