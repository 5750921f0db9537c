"""Understanding the launchers people write in mcp.json (npx, pnpm dlx, bunx, uvx, uv tool run,
pipx run, docker run) as package references and images the sandbox can run.

More: docs/admin.md, "Module notes"."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from django.utils import timezone

from registry.servers.importing.package_versions import PackageLookupError, package_newest_version

if TYPE_CHECKING:
    from registry.servers.importing.entries import ParsedEntry

RegistryName = Literal["npm", "pypi", "oci"]

NPM_RUNNERS = {("npx",): "npx", ("pnpm", "dlx"): "pnpm dlx", ("bunx",): "bunx"}
PYPI_RUNNERS = {("uvx",): "uvx", ("uv", "tool", "run"): "uv tool run", ("pipx", "run"): "pipx run"}
DOCKER_RUNNERS = {("docker", "run"): "docker run", ("podman", "run"): "podman run"}

# An exact npm version (semver 2.0) and an exact PyPI version (PEP 440, public part).
_NPM_EXACT = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_PYPI_EXACT = re.compile(
    r"^(?:\d+!)?\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[a-z0-9.]+)?$",
    re.IGNORECASE,
)
_NPM_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$", re.IGNORECASE)
_PYPI_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_UNPINNED = {"", "latest"}

# npx / pnpm dlx / bunx options that change nothing about what runs.
_NPM_FLAGS = {"-y", "--yes", "-q", "--quiet", "--silent", "--bun", "-s"}
_NPM_PACKAGE_OPTIONS = {"-p", "--package"}
# uvx / uv tool run / pipx run options that change nothing about what runs.
_PYPI_FLAGS = {"-q", "--quiet", "--isolated", "--no-cache", "-n", "--verbose", "-v"}
_PYPI_PACKAGE_OPTIONS = {"--from", "--spec"}

# docker run options: what each becomes. Values: "keep" (part of the canonical form), "env",
# "workdir", "drop" (harmless here: the sandbox decides it), or the reason it would loosen it.
_DOCKER_BOOLEAN = {
    "-i": "keep",
    "--interactive": "keep",
    "--rm": "keep",
    "--init": "drop",
    "--read-only": "drop",
    "-q": "drop",
    "--quiet": "drop",
    "-t": "a terminal would garble the JSON-RPC on stdout",
    "--tty": "a terminal would garble the JSON-RPC on stdout",
    "-d": "a detached container has no stdio to talk MCP over",
    "--detach": "a detached container has no stdio to talk MCP over",
    "--privileged": "it would give the container every capability and the host's devices",
    "-P": "it would publish the container's ports on the host",
    "--publish-all": "it would publish the container's ports on the host",
    "--no-healthcheck": "drop",
    "--oom-kill-disable": "it would exempt the container from the memory limit",
}
_DOCKER_VALUED = {
    "-e": "env",
    "--env": "env",
    "-w": "workdir",
    "--workdir": "workdir",
    "--name": "drop",
    "--pull": "drop",
    "--platform": "drop",
    "-l": "drop",
    "--label": "drop",
    "--log-driver": "drop",
    "--log-opt": "drop",
    "--restart": "drop",
    "--stop-signal": "drop",
    "--stop-timeout": "drop",
    "--cap-drop": "drop",
    "-h": "drop",
    "--hostname": "drop",
    "--env-file": "Toolroom does not read files from the importing machine; set the variables as "
    "env",
    "-v": "it would mount a host path into the container",
    "--volume": "it would mount a host path into the container",
    "--volumes-from": "it would mount another container's volumes",
    "--mount": "it would mount a host path into the container",
    "--tmpfs": "the sandbox gives every container its own small noexec /tmp",
    "--network": "the trust tier and data sensitivity decide the network",
    "--net": "the trust tier and data sensitivity decide the network",
    "--network-alias": "the trust tier and data sensitivity decide the network",
    "-p": "it would publish a port on the host",
    "--publish": "it would publish a port on the host",
    "--expose": "it would expose a port",
    "--cap-add": "it would add Linux capabilities (the sandbox drops all)",
    "--device": "it would hand the container a host device",
    "--pid": "it would share a process namespace",
    "--ipc": "it would share an IPC namespace",
    "--uts": "it would share the host's UTS namespace",
    "--userns": "it would change the user namespace",
    "--cgroupns": "it would change the cgroup namespace",
    "--cgroup-parent": "it would move the container out of the engine's cgroup",
    "--security-opt": "it would change seccomp, AppArmor or no-new-privileges",
    "-u": "the sandbox runs every server as nobody (65534)",
    "--user": "the sandbox runs every server as nobody (65534)",
    "--group-add": "it would add groups to the server's user",
    "--add-host": "it would change name resolution",
    "--dns": "it would change name resolution",
    "--dns-search": "it would change name resolution",
    "--dns-option": "it would change name resolution",
    "--sysctl": "it would change kernel parameters",
    "--ulimit": "the sandbox sets the limits",
    "-m": "the trust tier sets the memory limit",
    "--memory": "the trust tier sets the memory limit",
    "--memory-swap": "the trust tier sets the memory limit",
    "--cpus": "the trust tier sets the CPU limit",
    "--cpu-shares": "the trust tier sets the CPU limit",
    "-c": "the trust tier sets the CPU limit",
    "--pids-limit": "the trust tier sets the process limit",
    "--shm-size": "the sandbox sets the shared memory",
    "--runtime": "it would change the container runtime",
    "--entrypoint": "the image's own entrypoint runs; put the program in the arguments",
    "--gpus": "it would hand the container the host's GPUs",
}


class LauncherError(ValueError):
    """The command names a launcher, but not in a form Toolroom can run; the message says why."""


@dataclass(frozen=True)
class Launcher:
    """A package or image launched by a runner, with the server's own arguments.

    `version` is "" when the command did not pin one (see `pinned`); `program` is the program
    to run from the package when it differs from the package (uvx --from, npx -p);
    `env` holds docker's `-e` settings (None: the value comes from the entry's env or is kept);
    `dropped` lists (option, reason) pairs not carried over.
    """

    registry: RegistryName
    runner: str
    identifier: str
    version: str
    arguments: tuple[str, ...] = ()
    program: str = ""
    env: dict[str, str | None] = field(default_factory=dict)
    working_directory: str = ""
    dropped: tuple[tuple[str, str], ...] = ()
    runner_path: str = ""  # the runner's first word as written (e.g. /usr/local/bin/npx)

    @property
    def pinned(self) -> bool:
        return bool(self.version)

    @property
    def image(self) -> str:
        """For docker run: the image reference as given (the tag or digest included)."""
        if self.registry != "oci":
            return ""
        if not self.version:
            return self.identifier
        separator = "@" if self.version.startswith("sha256:") else ":"
        return f"{self.identifier}{separator}{self.version}"

    def with_version(self, version: str) -> Launcher:
        return replace(self, version=version)

    def package_spec(self) -> str:
        if self.registry == "npm":
            return f"{self.identifier}@{self.version}" if self.version else self.identifier
        if self.registry == "pypi":
            return f"{self.identifier}=={self.version}" if self.version else self.identifier
        return self.image

    def argv(self) -> list[str]:
        """The canonical launcher command line (what is stored and exported)."""
        runner = [self.runner_path or self.runner.split()[0], *self.runner.split()[1:]]
        if self.registry == "oci":
            env_options: list[str] = []
            for name in self.env:
                env_options += ["-e", name]
            return [*runner, "-i", "--rm", *env_options, self.image, *self.arguments]
        if self.registry == "npm":
            prefix = ["-y"] if self.runner == "npx" else []
            if self.program:
                return [
                    *runner,
                    *prefix,
                    "--package",
                    self.package_spec(),
                    self.program,
                    *self.arguments,
                ]
            return [*runner, *prefix, self.package_spec(), *self.arguments]
        if self.program:
            option = "--spec" if self.runner == "pipx run" else "--from"
            return [*runner, option, self.package_spec(), self.program, *self.arguments]
        return [*runner, self.package_spec(), *self.arguments]

    def describe(self) -> str:
        kind = {"npm": "npm package", "pypi": "PyPI package", "oci": "image"}[self.registry]
        return f"{kind} {self.package_spec()}"


def _runner(argv: list[str]) -> tuple[str, int] | None:
    """(the runner's name, how many words it takes), or None if argv is not a launcher."""
    first = os.path.basename(argv[0]) if argv else ""
    first = first.removesuffix(".cmd").removesuffix(".exe")
    words = [first, *argv[1:3]]
    for table in (NPM_RUNNERS, PYPI_RUNNERS, DOCKER_RUNNERS):
        for prefix, name in table.items():
            if tuple(words[: len(prefix)]) == prefix:
                return name, len(prefix)
    return None


def is_launcher(argv: list[str]) -> bool:
    return _runner(argv) is not None


def launcher_parse(argv: list[str]) -> Launcher | None:
    """The package or image `argv` launches, or None when argv is not a launcher command line.

    Raises LauncherError when it is one but cannot be run as written.
    """
    found = _runner(argv)
    if found is None:
        return None
    runner, width = found
    rest = list(argv[width:])
    if runner in NPM_RUNNERS.values():
        launcher = _parse_package(_NPM_RUNNER, runner, rest)
    elif runner in PYPI_RUNNERS.values():
        launcher = _parse_package(_PYPI_RUNNER, runner, rest)
    else:
        launcher = _parse_docker(runner, rest)
    if os.path.basename(argv[0]) != argv[0]:
        # A host path to the runner is kept for local runs; the sandbox runs the package itself.
        launcher = replace(launcher, runner_path=argv[0])
    return launcher


def _option_value(rest: list[str], index: int, option: str) -> tuple[str, int]:
    """The value of `option` at rest[index] (`--opt=value` or `--opt value`), and the next index."""
    word = rest[index]
    if "=" in word and word.startswith("--"):
        return word.split("=", 1)[1], index + 1
    if index + 1 >= len(rest):
        raise LauncherError(f"{option} needs a value.")
    return rest[index + 1], index + 2


@dataclass(frozen=True)
class _PackageRunner:
    """What tells npm's runners (npx, pnpm dlx, bunx) from PyPI's (uvx, uv tool run, pipx run):
    their harmless flags, the options naming the package apart from the program, the spec."""

    registry: Literal["npm", "pypi"]
    flags: frozenset[str]
    package_options: frozenset[str]
    split_spec: Callable[[str], tuple[str, str]]
    refused_options: str  # what the options it refuses change, for the message
    package_option_once: bool  # a second --package is another package (npm), not a correction
    program_is_package: Callable[[str, str], bool]  # a program naming the package itself


def _parse_package(kind: _PackageRunner, runner: str, rest: list[str]) -> Launcher:
    package = ""
    index = 0
    while index < len(rest) and rest[index].startswith("-"):
        word = rest[index]
        name = word.split("=", 1)[0]
        if word == "--":
            index += 1
            break
        if name in kind.package_options:
            if package and kind.package_option_once:
                raise LauncherError(
                    f"{runner} installs more than one package (--package twice); Toolroom runs "
                    "one package per server."
                )
            package, index = _option_value(rest, index, name)
            continue
        if name in kind.flags:
            index += 1
            continue
        raise LauncherError(
            f"The {runner} option {word!r} is not supported: it changes how or what {runner} "
            f"installs{kind.refused_options}. Remove it, or register the package without it."
        )
    if index >= len(rest):
        raise LauncherError(f"{runner} is given no package to run.")
    program = rest[index] if package else ""
    identifier, version = kind.split_spec(package or rest[index])
    if program and kind.program_is_package(program, identifier):
        program = ""
    return Launcher(
        registry=kind.registry,
        runner=runner,
        identifier=identifier,
        version=version,
        program=program,
        arguments=tuple(rest[index + 1 :]),
    )


def _split_npm_spec(spec: str) -> tuple[str, str]:
    if spec.startswith((".", "/", "~")) or ":" in spec or spec.endswith((".tgz", ".tar.gz")):
        raise LauncherError(
            f"{spec!r} is not a package on the npm registry (a path, URL or git reference); "
            "Toolroom runs registry packages it can pin."
        )
    at = spec.find("@", 1)
    identifier, version = (spec[:at], spec[at + 1 :]) if at > 0 else (spec, "")
    if not _NPM_NAME.match(identifier):
        raise LauncherError(f"{identifier!r} is not an npm package name.")
    if version in _UNPINNED:
        return identifier, ""
    if not _NPM_EXACT.match(version):
        raise LauncherError(
            f"{spec!r} asks for a version range or tag ({version!r}); Toolroom runs exact "
            f"versions only. Give one (e.g. {identifier}@1.2.3), or leave the version out to pin "
            "the newest one at import."
        )
    return identifier, version.removeprefix("v")


def _normalise_pypi(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split_pypi_spec(spec: str) -> tuple[str, str]:
    if spec.startswith((".", "/", "~", "git+")) or "://" in spec:
        raise LauncherError(
            f"{spec!r} is not a package on PyPI (a path, URL or VCS reference); Toolroom runs "
            "index packages it can pin."
        )
    if "[" in spec:
        raise LauncherError(
            f"{spec!r} asks for extras; Toolroom builds the package without extras. Register "
            "the package without them."
        )
    match = re.match(r"^([A-Za-z0-9._-]+)\s*(.*)$", spec)
    identifier, rest = (match[1], match[2].strip()) if match else (spec, "")
    if not _PYPI_NAME.match(identifier):
        raise LauncherError(f"{identifier!r} is not a PyPI package name.")
    if rest.startswith("=="):
        version = rest[2:].strip()
    elif rest.startswith("@") and not rest.startswith("@ "):
        version = rest[1:].strip()  # uvx's name@version
    elif not rest:
        version = ""
    else:
        version = rest
    if version in _UNPINNED:
        return identifier, ""
    if not _PYPI_EXACT.match(version) or "*" in version:
        raise LauncherError(
            f"{spec!r} asks for a version range ({version!r}); Toolroom runs exact versions "
            f"only. Give one (e.g. {identifier}==1.2.3), or leave the version out to pin the "
            "newest one at import."
        )
    return identifier, version


_NPM_RUNNER = _PackageRunner(
    registry="npm",
    flags=frozenset(_NPM_FLAGS),
    package_options=frozenset(_NPM_PACKAGE_OPTIONS),
    split_spec=_split_npm_spec,
    refused_options="",
    package_option_once=True,
    program_is_package=lambda _program, _identifier: False,
)
_PYPI_RUNNER = _PackageRunner(
    registry="pypi",
    flags=frozenset(_PYPI_FLAGS),
    package_options=frozenset(_PYPI_PACKAGE_OPTIONS),
    split_spec=_split_pypi_spec,
    refused_options=" (extra packages, indexes, Python versions)",
    package_option_once=False,
    program_is_package=lambda program, identifier: (
        _normalise_pypi(program) == _normalise_pypi(identifier)
    ),
)


def _parse_docker(runner: str, rest: list[str]) -> Launcher:
    env: dict[str, str | None] = {}
    dropped: list[tuple[str, str]] = []
    working_directory = ""
    index = 0
    while index < len(rest) and rest[index].startswith("-"):
        word = rest[index]
        if word == "--":
            index += 1
            break
        name = word.split("=", 1)[0]
        if name in _DOCKER_VALUED:
            value, index = _option_value(rest, index, name)
            if "=" in word and not word.startswith("--"):
                value = word.split("=", 1)[1]
            what = _DOCKER_VALUED[name]
            if what == "env":
                key, sep, val = value.partition("=")
                env[key] = val if sep else None
            elif what == "workdir":
                working_directory = value
            elif what != "drop":
                dropped.append((f"{name} {value}", what))
            continue
        flags = _short_cluster(word) if not word.startswith("--") else [word]
        if flags is None or any(flag not in _DOCKER_BOOLEAN for flag in flags):
            raise LauncherError(
                f"The {runner} option {word!r} is not understood, so the image cannot be told "
                "from its arguments. Remove it."
            )
        for flag in flags:
            what = _DOCKER_BOOLEAN[flag]
            if what not in ("keep", "drop"):
                dropped.append((flag, what))
        index += 1
    if index >= len(rest):
        raise LauncherError(f"{runner} is given no image to run.")
    image = rest[index]
    identifier, version = _split_image(image)
    return Launcher(
        registry="oci",
        runner=runner,
        identifier=identifier,
        version=version,
        arguments=tuple(rest[index + 1 :]),
        env=env,
        working_directory=working_directory,
        dropped=tuple(dropped),
    )


def _short_cluster(word: str) -> list[str] | None:
    """`-it` is `-i -t`; None when it is not a cluster of one-letter flags."""
    letters = word[1:]
    if not letters.isalpha():
        return None
    return [f"-{letter}" for letter in letters]


def _split_image(image: str) -> tuple[str, str]:
    if not image or image.startswith("-") or any(ch.isspace() for ch in image):
        raise LauncherError(f"{image!r} is not an image reference.")
    if "@" in image:
        repository, digest = image.split("@", 1)
        return repository, digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = image.rsplit(":", 1)
        return repository, tag
    return image, ""


def dropped_summary(launcher: Launcher) -> str:
    """The docker options not carried over, for the import report."""
    return "; ".join(f"{option} ({reason})" for option, reason in launcher.dropped)


# --- Adopting a launcher: the package reference, pinned, and the fields to store ---------------


@dataclass(frozen=True)
class PackagePin:
    """An unpinned package pinned at import: which version, from where, when."""

    registry: str
    identifier: str
    version: str
    looked_up_at: datetime

    def describe(self) -> str:
        where = "PyPI" if self.registry == "pypi" else "the npm registry"
        return (
            f"{self.identifier} was not pinned; pinned to {self.version}, the newest version "
            f"{where} served at import ({self.looked_up_at:%Y-%m-%d %H:%M} UTC)."
        )

    def as_details(self) -> dict[str, str]:
        return {
            "registry": self.registry,
            "identifier": self.identifier,
            "version": self.version,
            "looked_up_at": self.looked_up_at.isoformat(),
        }


@dataclass
class LauncherAdoption:
    """What a launcher command line becomes: the server fields to set, the pin, the notes."""

    launcher: Launcher
    fields: dict[str, Any]
    pin: PackagePin | None = None
    warnings: list[str] = field(default_factory=list)


VersionLookup = Callable[..., str]


def launcher_adopt(
    *,
    argv: list[str],
    env: Mapping[str, str | None] | None = None,
    lookup: VersionLookup | None = None,
) -> LauncherAdoption | None:
    """Parse `argv` as a launcher and pin it; None when argv is no launcher.

    `env` is the server's env as given (docker's `-e` settings are merged into it). Raises
    LauncherError for a command that cannot be run as written and PackageLookupError when an
    unpinned package cannot be pinned.
    """
    launcher = launcher_parse(argv)
    if launcher is None:
        return None
    lookup = lookup or package_newest_version
    warnings: list[str] = []
    pin: PackagePin | None = None
    if launcher.registry != "oci" and not launcher.pinned:
        version = lookup(registry=launcher.registry, identifier=launcher.identifier)
        pin = PackagePin(launcher.registry, launcher.identifier, version, timezone.now())
        launcher = launcher.with_version(version)
        warnings.append(pin.describe())
    merged_env: dict[str, str | None] = dict(env or {})
    fields: dict[str, Any] = {"command": launcher.argv()}
    if launcher.registry == "oci":
        for name, value in launcher.env.items():
            if value is not None or name not in merged_env:
                merged_env[name] = value
        fields["env"] = merged_env
        fields["image"] = launcher.image
        fields.update(
            package_registry="oci" if launcher.version else "",
            package_identifier=launcher.identifier if launcher.version else "",
            package_version=launcher.version,
        )
        if launcher.working_directory:
            fields["working_directory"] = launcher.working_directory
        if launcher.dropped:
            warnings.append(
                f"{launcher.runner} options not carried over: {dropped_summary(launcher)}."
            )
        if not launcher.version:
            warnings.append(
                f"The image {launcher.identifier} has no tag or digest: the sandbox runs "
                "whatever the engine has under it (`latest`); its digest is recorded at each "
                "run. Give a tag to pin it."
            )
        if launcher.env:
            names = ", ".join(sorted(launcher.env))
            warnings.append(f"{launcher.runner} -e settings became the server's env: {names}.")
    else:
        fields.update(
            package_registry=launcher.registry,
            package_identifier=launcher.identifier,
            package_version=launcher.version,
            image="",
        )
    return LauncherAdoption(launcher=launcher, fields=fields, pin=pin, warnings=warnings)


def entries_adopt_launchers(entries: list[ParsedEntry], *, lookup: VersionLookup | None) -> None:
    """Turn each stdio entry's launcher command into a pinned package or image reference.

    Entries that already name a package or image (server.json, YAML with `package:`) keep what
    they say; problems are added to the entry, naming its command.
    """
    for entry in entries:
        argv = entry.fields.get("command")
        if entry.problems or not isinstance(argv, list) or not argv:
            continue
        if entry.fields.get("package_registry") or entry.fields.get("image"):
            continue
        try:
            adoption = launcher_adopt(argv=argv, env=entry.fields.get("env"), lookup=lookup)
        except (LauncherError, PackageLookupError) as exc:
            entry.problem(entry.label_for("command"), str(exc))
            continue
        if adoption is None:
            continue
        entry.fields.update(adoption.fields)
        entry.warnings.extend(adoption.warnings)
        if adoption.pin is not None:
            entry.pins.append(adoption.pin)
