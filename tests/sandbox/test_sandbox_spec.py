"""The sandbox's pure parts: what a container spec refuses, the fixed hardening, stream framing."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from workers.adapters.sandbox import ContainerFate, ContainerSpec, HostMount, SandboxSpecError
from workers.adapters.sandbox.images.base import apt_mirror
from workers.adapters.sandbox.images.build import _default_command
from workers.adapters.sandbox.images.pypi import _parse_console_scripts
from workers.adapters.sandbox.networks import _creation_order
from workers.adapters.sandbox.spec import (
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNER_PID,
    LABEL_SERVER,
    hardened_host_config,
    process_identity,
    resource_labels,
)
from workers.adapters.sandbox.streams import (
    STDERR,
    STDOUT,
    FrameDemuxer,
    LineSplitter,
    LineTooLongError,
    StderrTail,
    StreamProtocolError,
)
from workers.management.commands.sandbox import split_package


def spec(**overrides: Any) -> ContainerSpec:
    values: dict[str, Any] = {"server_key": "time", "image": "toolroom/pypi-mcp-server-time:abc"}
    return ContainerSpec(**(values | overrides))


def test_a_spec_defaults_to_nobody_no_network_and_a_read_only_root():
    made = spec()
    assert made.user == "65534:65534"
    assert made.network_mode == "none"
    assert made.read_only_root is True
    assert made.argv == ()


@pytest.mark.parametrize(
    "source",
    [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/var/run",
        "/run",
        "/",
        "/var",
        "/var/lib/docker/volumes",
        "/proc/1/root",
        "/run/containerd/containerd.sock",
    ],
)
def test_the_engine_socket_and_host_roots_are_never_mounted(source):
    with pytest.raises(SandboxSpecError) as refused:
        HostMount(source=source, target="/data")
    assert refused.value.field == "mounts"


def test_a_symlink_to_the_docker_socket_is_refused(tmp_path):
    link = tmp_path / "innocent"
    link.symlink_to("/var/run/docker.sock")
    with pytest.raises(SandboxSpecError, match="socket"):
        HostMount(source=str(link), target="/data")


def test_a_plain_folder_is_mounted_read_only(tmp_path):
    mount = HostMount(source=str(tmp_path), target="/data")
    config = hardened_host_config(
        memory_mb=64,
        cpus=0.5,
        pids_limit=32,
        read_only_root=True,
        tmpfs_mb=8,
        network_mode="none",
        mounts=[mount],
    )
    assert config["binds"] == {str(tmp_path): {"bind": "/data", "mode": "ro"}}


@pytest.mark.parametrize("target", ["/", "/proc/x", "/dev", "/tmp"])
def test_a_mount_may_not_cover_system_paths_in_the_container(tmp_path, target):
    with pytest.raises(SandboxSpecError):
        HostMount(source=str(tmp_path), target=target)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"user": "0"}, "user"),
        ({"user": "0:0"}, "user"),
        ({"user": "1000:0"}, "user"),
        ({"user": "root"}, "user"),
        ({"server_key": "a b"}, "server_key"),
        ({"server_key": "../x"}, "server_key"),
        ({"image": ""}, "image"),
        ({"argv": ["ok", "nul\x00"]}, "argv"),
        ({"env": {"BAD NAME": "x"}}, "env"),
        ({"memory_mb": 4}, "memory_mb"),
        ({"cpus": 0}, "cpus"),
        ({"pids_limit": 1}, "pids_limit"),
        ({"network_mode": "host"}, "network_mode"),
        ({"egress_allowlist": ["example.test"]}, "egress_allowlist"),
        ({"egress_allowlist": ["example.test:99999"]}, "egress_allowlist"),
        ({"owner": "two\nlines"}, "owner"),
    ],
)
def test_a_spec_refuses_what_the_sandbox_never_runs(overrides, field):
    with pytest.raises(SandboxSpecError) as refused:
        spec(**overrides)
    assert refused.value.field == field


def test_the_spec_keeps_a_copy_of_what_it_was_given():
    env = {"A": "1"}
    argv = ["server"]
    made = spec(env=env, argv=argv, egress_allowlist=["API.Example.test:443"])
    env["A"] = "2"
    argv.append("--evil")
    assert made.env == {"A": "1"}
    assert made.argv == ("server",)
    assert made.egress_allowlist == ("api.example.test:443",)


def test_specs_compare_and_hash_by_value():
    assert spec(env={"A": "1"}) == spec(env={"A": "1"})
    assert hash(spec(env={"A": "1"})) == hash(spec(env={"A": "1"}))
    assert spec(env={"A": "1"}) != spec(env={"A": "2"})
    assert len({spec(), spec(), spec(memory_mb=512)}) == 2


def test_every_container_gets_the_fixed_hardening():
    config = hardened_host_config(
        memory_mb=256,
        cpus=0.5,
        pids_limit=64,
        read_only_root=True,
        tmpfs_mb=16,
        network_mode="none",
    )
    assert config["cap_drop"] == ["ALL"]
    assert config["security_opt"] == ["no-new-privileges"]
    assert config["privileged"] is False
    assert config["init"] is True
    assert config["ipc_mode"] == "private"
    assert config["read_only"] is True
    assert config["mem_limit"] == config["memswap_limit"] == "256m"
    assert config["nano_cpus"] == 500_000_000
    assert config["pids_limit"] == 64
    assert config["auto_remove"] is True
    assert "noexec" in config["tmpfs"]["/tmp"]
    assert config["log_config"]["Type"] == "json-file"
    assert config["log_config"]["Config"]["max-size"] == "1m"
    assert "binds" not in config


def test_labels_name_the_installation_owner_process_and_server():
    labels = resource_labels(
        spec(owner="worker-a", installation="toolroom-a"), session_id="abc", role="server"
    )
    assert labels[LABEL_MANAGED] == "true"
    assert labels[LABEL_INSTALLATION] == "toolroom-a"
    assert labels[LABEL_OWNER] == "worker-a"
    assert labels[LABEL_SERVER] == "time"
    assert labels[LABEL_OWNER_PID] == process_identity()


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_frames_are_demultiplexed_however_the_bytes_are_cut():
    data = frame(STDOUT, b'{"a":1}\n') + frame(STDERR, b"oops\n") + frame(STDOUT, b"tail")
    for cut in range(1, len(data)):
        demux = FrameDemuxer()
        pieces = list(demux.feed(data[:cut])) + list(demux.feed(data[cut:]))
        out = b"".join(p for s, p in pieces if s == STDOUT)
        err = b"".join(p for s, p in pieces if s == STDERR)
        assert (out, err) == (b'{"a":1}\ntail', b"oops\n")
        assert demux.pending == 0


def test_bytes_that_are_not_frames_are_refused():
    with pytest.raises(StreamProtocolError):
        list(FrameDemuxer().feed(b"HTTP/1.1 200 OK\r\n"))


def test_lines_are_split_and_a_huge_line_is_refused():
    lines = LineSplitter(max_bytes=10)
    assert lines.feed(b"one\ntw") == [b"one"]
    assert lines.feed(b"o\n") == [b"two"]
    with pytest.raises(LineTooLongError):
        lines.feed(b"x" * 11)


def test_the_stderr_tail_is_bounded():
    tail = StderrTail(max_lines=2, max_line_chars=5)
    tail.feed(b"first\nsecond line\nthi")
    tail.feed(b"rd\n")
    assert tail.tail() == ("secon", "third")
    tail.feed(b"no newline")
    tail.finish()
    assert tail.tail()[-1] == "no ne"


def test_a_fate_explains_an_oom_kill_to_an_admin():
    fate = ContainerFate(
        container_id="c",
        server_key="s",
        exit_code=137,
        oom_killed=True,
        stopped_by_toolroom=False,
        memory_limit_mb=256,
    )
    assert fate.failed
    assert fate.describe() == "the server was killed for using more than 256 MB of memory (OOM)"


def test_a_fate_of_a_server_stopped_by_toolroom_is_not_a_failure():
    fate = ContainerFate(
        container_id="c",
        server_key="s",
        exit_code=137,
        oom_killed=False,
        stopped_by_toolroom=True,
        memory_limit_mb=256,
    )
    assert not fate.failed


def test_a_crash_names_the_exit_code_and_the_last_stderr_line():
    fate = ContainerFate(
        container_id="c",
        server_key="s",
        exit_code=3,
        oom_killed=False,
        stopped_by_toolroom=False,
        memory_limit_mb=256,
        stderr_tail=("starting", "ImportError: no module named x"),
    )
    assert fate.describe() == (
        "the server exited with code 3; last stderr line: ImportError: no module named x"
    )


def test_console_scripts_are_read_from_entry_points():
    text = "[console_scripts]\nmcp-server-time = mcp_server_time:main\n\n[other]\nx = y\n"
    scripts = _parse_console_scripts(text)
    assert scripts == ("mcp-server-time",)
    assert _default_command(scripts, "mcp-server-time") == ["mcp-server-time"]
    assert _default_command(("a", "b"), "pkg") == []


def test_the_debian_mirror_comes_from_apts_sources():
    assert apt_mirror().startswith(("http://", "https://"))


@pytest.mark.parametrize(
    ("registry", "text", "expected"),
    [
        ("pypi", "mcp-server-time==2026.10.19", ("mcp-server-time", "2026.10.19")),
        ("npm", "@scope/server@1.2.3", ("@scope/server", "1.2.3")),
        ("npm", "server@1.2.3", ("server", "1.2.3")),
    ],
)
def test_package_arguments_carry_a_pinned_version(registry, text, expected):
    assert split_package(registry, text) == expected


@pytest.mark.parametrize(("registry", "text"), [("pypi", "mcp-server-time"), ("npm", "@scope/x")])
def test_an_unpinned_package_is_refused(registry, text):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="pinned version"):
        split_package(registry, text)


def test_the_image_inputs_hash_is_stable():
    from workers.adapters.sandbox.images.build import _inputs_hash

    inputs = {"b": [1, 2], "a": "x"}
    assert _inputs_hash(inputs) == _inputs_hash(json.loads(json.dumps(inputs)))
    assert _inputs_hash(inputs) != _inputs_hash(inputs | {"a": "y"})


def test_egress_bridges_are_ordered_by_their_creation_time_not_its_text():
    # The engine writes RFC 3339 with trailing zeros of the fraction dropped, so ".6Z" is later
    # than ".55Z" although it sorts first as text; a missing fraction is a whole second.
    networks = [
        {"Id": "c", "Created": "2026-11-21T23:24:16.6Z"},
        {"Id": "b", "Created": "2026-11-21T23:24:16.55Z"},
        {"Id": "a", "Created": "2026-11-21T23:24:16Z"},
        {"Id": "d", "Created": "2026-11-22T00:24:16.1+01:00"},  # the same instant as "a", +0.1 s
        {"Id": "e", "Created": "not a time"},
    ]
    assert [n["Id"] for n in sorted(networks, key=_creation_order)] == ["a", "d", "b", "c", "e"]
