"""Rules for how a server is launched or reached, shared by the model and the importers.

Pure functions raising `LaunchSpecError(field, message)`: a stdio server is an argv list (never a
shell command line), an HTTP server a URL that passes the network guard, env and header names are
what a process and HTTP accept.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from registry.core.netguard import UnsafeUrlError, check_server_url
from registry.core.secret_fields import MASK

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_SHELL_META = set(";&|<>$`(){}*?![]~\\\"'")
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "cmd", "cmd.exe", "powershell", "pwsh"}
EGRESS_ENTRY = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


class LaunchSpecError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def check_argv(argv: Any) -> list[str]:
    if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
        raise LaunchSpecError("command", "The command must be a list of arguments (text).")
    if not argv or not argv[0].strip():
        raise LaunchSpecError(
            "command", "A stdio server needs a command: the program to run, then its arguments."
        )
    program = argv[0]
    if any(ch.isspace() for ch in program) or _SHELL_META & set(program):
        try:
            suggestion = shlex.split(program)
        except ValueError:
            suggestion = []
        hint = f" Did you mean {suggestion!r}?" if len(suggestion) > 1 else ""
        raise LaunchSpecError(
            "command",
            f"The program {program!r} looks like a shell command line; give the program and each "
            f"argument as separate list items, nothing is run through a shell.{hint}",
        )
    base = program.rsplit("/", 1)[-1].lower()
    if base in _SHELLS and any(arg in ("-c", "/c", "-Command", "-command") for arg in argv[1:]):
        raise LaunchSpecError(
            "command",
            f"The command runs a shell ({base} -c ...); give the program and its arguments "
            "directly so that nothing is interpreted by a shell.",
        )
    if any("\x00" in arg for arg in argv):
        raise LaunchSpecError("command", "Arguments must not contain NUL characters.")
    return argv


def check_url(url: str, *, allowed_networks: Iterable[str]) -> str:
    try:
        return check_server_url(url, allowed_networks=allowed_networks)
    except UnsafeUrlError as exc:
        raise LaunchSpecError("url", str(exc)) from exc


# What the pages show instead of a stored secret is never a secret itself (a renamed masked entry
# would otherwise store the mask).
_MASK_IS_NO_VALUE = f"The value of {{name}} is the mask {MASK}, not a secret: type the value."


def check_env(env: Mapping[str, Any]) -> None:
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise LaunchSpecError(
                "env", f"{name!r} is not a valid environment variable name (letters, digits, _)."
            )
        if not isinstance(value, str):
            raise LaunchSpecError("env", f"The value of {name} must be text.")
        if "\x00" in value:
            raise LaunchSpecError("env", f"The value of {name} contains a NUL character.")
        if MASK in value:
            raise LaunchSpecError("env", _MASK_IS_NO_VALUE.format(name=name))


def check_headers(headers: Mapping[str, Any]) -> None:
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise LaunchSpecError("headers", f"{name!r} is not a valid HTTP header name.")
        if not isinstance(value, str):
            raise LaunchSpecError("headers", f"The value of header {name} must be text.")
        if "\r" in value or "\n" in value or "\x00" in value:
            raise LaunchSpecError("headers", f"The value of header {name} contains a line break.")
        if MASK in value:
            raise LaunchSpecError("headers", _MASK_IS_NO_VALUE.format(name=f"header {name}"))


def check_egress_allowlist(entries: Any) -> list[str]:
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise LaunchSpecError("egress_allowlist", "The egress allowlist is a list of host:port.")
    for entry in entries:
        match = EGRESS_ENTRY.match(entry)
        if not match or not 0 < int(match["port"]) < 65536:
            raise LaunchSpecError(
                "egress_allowlist", f"{entry!r} is not host:port (e.g. api.github.com:443)."
            )
    return entries
