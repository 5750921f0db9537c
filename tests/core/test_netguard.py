"""The network guard in front of MCP server URLs."""

from __future__ import annotations

import pytest

from registry.core.netguard import UnsafeUrlError, check_resolved_address, check_server_url

NO_NETWORKS: list[str] = []


@pytest.mark.parametrize(
    "url",
    [
        "https://mcp.example.com/mcp",
        "http://93.184.216.34:8080/sse",
        "https://[2606:4700:4700::1111]/mcp",
    ],
)
def test_it_accepts_public_http_urls(url):
    assert check_server_url(url, allowed_networks=NO_NETWORKS) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "Only http"),
        ("javascript:alert(1)", "Only http"),
        ("ftp://example.com/x", "Only http"),
        ("https://user:pass@mcp.example.com/", "credentials"),
        ("https://token@mcp.example.com/", "credentials"),
        ("http://127.0.0.1:8000/mcp", "loopback"),
        ("http://localhost/mcp", "loopback"),
        ("http://app.localhost/mcp", "loopback"),
        ("http://[::1]/mcp", "loopback"),
        ("http://10.0.0.5/mcp", "private"),
        ("http://192.168.1.1/mcp", "private"),
        ("http://172.16.0.1/mcp", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[fe80::1]/mcp", "link-local"),
        ("http://[::ffff:127.0.0.1]/mcp", "loopback"),
        ("http://2130706433/mcp", "loopback"),  # 127.0.0.1 as one integer
        ("http://0x7f.1/mcp", "loopback"),
        ("http://0177.0.0.1/mcp", "loopback"),
        ("http://0.0.0.0/mcp", "unspecified"),
        ("http://100.64.0.1/mcp", "non-global"),
        ("https://example.com:0/", "port"),
        ("https://exa mple.com/", "spaces"),
        ("", "empty"),
    ],
)
def test_it_refuses_unsafe_urls_and_says_why(url, reason):
    with pytest.raises(UnsafeUrlError, match=reason):
        check_server_url(url, allowed_networks=NO_NETWORKS)


def test_allowed_networks_let_loopback_through():
    url = "http://127.0.0.1:9000/mcp"
    assert check_server_url(url, allowed_networks=["127.0.0.0/8"]) == url
    with pytest.raises(UnsafeUrlError):
        check_server_url("http://10.1.1.1/mcp", allowed_networks=["127.0.0.0/8"])


def test_resolved_addresses_are_checked_at_connect_time():
    check_resolved_address("93.184.216.34", allowed_networks=NO_NETWORKS)
    with pytest.raises(UnsafeUrlError, match="private"):
        check_resolved_address("10.0.0.7", allowed_networks=NO_NETWORKS)
    check_resolved_address("10.0.0.7", allowed_networks=["10.0.0.0/8"])
