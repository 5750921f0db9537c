# shellcheck shell=bash
# Shared shell functions for Toolroom's set-up scripts: messages, finding Python, the virtual
# environment, and installing system packages. Sourced, never run; bash only.
#
# Nothing here downloads anything except through pip (PyPI) and apt-get (Debian's archive).

TOOLROOM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="$TOOLROOM_ROOT/.venv"
VENV_PY="$VENV_DIR/bin/python"
SETUP_LOG_DIR="$TOOLROOM_ROOT/var/log"
MIN_PYTHON_MINOR=11 # Python 3.11 or newer
PYTHON_CANDIDATES=(python3.13 python3.12 python3.11 python3)

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
    _BOLD=$'\e[1m' _RED=$'\e[31m' _DIM=$'\e[2m' _RESET=$'\e[0m'
else
    _BOLD="" _RED="" _DIM="" _RESET=""
fi

say() { printf '%s\n' "$*"; }
step() { printf '%s==>%s %s\n' "$_BOLD" "$_RESET" "$*"; }
note() { printf '%s    %s%s\n' "$_DIM" "$*" "$_RESET"; }

# die MESSAGE...: print every argument as a line on stderr and stop.
die() {
    printf '%sError:%s %s\n' "$_RED$_BOLD" "$_RESET" "$1" >&2
    shift
    local line
    for line in "$@"; do printf '       %s\n' "$line" >&2; done
    exit 1
}

is_root() { [[ "$(id -u)" == 0 ]]; }
have() { command -v "$1" >/dev/null 2>&1; }

# --- Python ------------------------------------------------------------------------------------

# _python_version PY: print the interpreter's "major minor", or fail if it does not run.
_python_version() {
    "$1" -c 'import sys; print(sys.version_info[0], sys.version_info[1])' 2>/dev/null
}

# find_python: print the path of a Python >= 3.11 whose venv and ensurepip modules work.
# PYTHON=/path/to/python overrides the search. Stops with a message naming what to install.
find_python() {
    local candidates=("${PYTHON_CANDIDATES[@]}") cand path version major minor
    local without_venv="" venv_minor="" too_old=""
    if [[ -n "${PYTHON:-}" ]]; then
        candidates=("$PYTHON")
    fi
    for cand in "${candidates[@]}"; do
        path="$(command -v "$cand" 2>/dev/null)" || continue
        # pyenv and similar shims exist for versions that are not active: they fail to run.
        version="$(_python_version "$path")" || continue
        read -r major minor <<<"$version"
        if ((major != 3 || minor < MIN_PYTHON_MINOR)); then
            too_old+=" $cand ($major.$minor)"
            continue
        fi
        if ! "$path" -c 'import ensurepip, venv; ensurepip.version()' >/dev/null 2>&1; then
            without_venv="$cand (3.$minor)"
            venv_minor="$minor"
            continue
        fi
        printf '%s\n' "$path"
        return 0
    done
    if [[ -n "$without_venv" ]]; then
        die "Python found, but it cannot create virtual environments: $without_venv has no venv/ensurepip module." \
            "On Debian or Ubuntu install it with:  apt-get install python3.$venv_minor-venv" \
            "(python3-venv for the default python3), then run this command again."
    fi
    if [[ -n "${PYTHON:-}" ]]; then
        die "PYTHON=$PYTHON is not a Python 3.$MIN_PYTHON_MINOR or newer that runs here${too_old:+ (found$too_old)}."
    fi
    die "Toolroom needs Python 3.$MIN_PYTHON_MINOR or newer; none found (tried ${PYTHON_CANDIDATES[*]}${too_old:+; too old:$too_old})." \
        "Install one: on Debian 12 or Ubuntu 24.04  apt-get install python3 python3-venv;" \
        "on macOS  brew install python@3.12.  Or name one:  make run PYTHON=/path/to/python3.12"
}

# --- Virtual environment -----------------------------------------------------------------------

_venv_works() {
    local version major minor
    [[ -x "$VENV_PY" ]] || return 1
    version="$(_python_version "$VENV_PY")" || return 1
    read -r major minor <<<"$version"
    ((major == 3 && minor >= MIN_PYTHON_MINOR)) || return 1
    "$VENV_PY" -m pip --version >/dev/null 2>&1
}

_pyproject_hash() {
    "$VENV_PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
        "$TOOLROOM_ROOT/pyproject.toml"
}

# ensure_venv runtime|dev: create .venv if needed and install Toolroom into it (editable), with the
# dev extras for `dev`. Skips the install when pyproject.toml has not changed since the last one.
ensure_venv() {
    local mode="$1" python hash stamp_dev stamp_runtime started log
    stamp_dev="$VENV_DIR/.toolroom-installed-dev"
    stamp_runtime="$VENV_DIR/.toolroom-installed-runtime"

    if ! _venv_works; then
        python="$(find_python)" || exit 1
        if [[ -e "$VENV_DIR" ]]; then
            step "Re-creating .venv (the existing one does not run)"
            rm -rf "$VENV_DIR"
        else
            step "Creating .venv with $python ($("$python" -c 'import platform; print(platform.python_version())'))"
        fi
        if ! "$python" -m venv "$VENV_DIR"; then
            rm -rf "$VENV_DIR"
            die "Could not create the virtual environment with $python (see the message above)."
        fi
    fi

    hash="$(_pyproject_hash)"
    if [[ -f "$stamp_dev" && "$(<"$stamp_dev")" == "$hash" ]]; then
        return 0 # the dev install includes the runtime one
    fi
    if [[ "$mode" == runtime && -f "$stamp_runtime" && "$(<"$stamp_runtime")" == "$hash" ]]; then
        return 0
    fi

    # The quickstart's demo runs the published time and git servers from this environment.
    local target=".[demo]" what="Toolroom, its dependencies and the demo's MCP servers"
    if [[ "$mode" == dev ]]; then
        target=".[dev]"
        what="Toolroom with its development tools"
    fi
    var_mkdir "$SETUP_LOG_DIR"
    log="$SETUP_LOG_DIR/pip-install.log"
    step "Installing $what into .venv (a minute or two the first time)"
    note "pip's output: ${log#"$TOOLROOM_ROOT"/}"
    rm -f "$stamp_dev" "$stamp_runtime"
    started=$SECONDS
    if ! (cd "$TOOLROOM_ROOT" && "$VENV_PY" -m pip install --disable-pip-version-check \
        --progress-bar off -e "$target") >"$log" 2>&1; then
        tail -n 25 "$log" >&2
        die "Installing $what failed; the last lines of pip's output are above," \
            "the whole of it is in ${log#"$TOOLROOM_ROOT"/}."
    fi
    printf '%s\n' "$hash" >"$VENV_DIR/.toolroom-installed-$mode.tmp"
    mv "$VENV_DIR/.toolroom-installed-$mode.tmp" "$VENV_DIR/.toolroom-installed-$mode"
    note "installed in $((SECONDS - started)) s"
}

# var_mkdir DIR...: folders under var/, which holds the quickstart's database, keys and passwords:
# made for their owner only (0700), var/ itself included when it does not exist yet.
var_mkdir() { (umask 077 && mkdir -p "$@"); }

# --- System packages ---------------------------------------------------------------------------

# can_apt_install: true on a Debian-like machine where we are root (no sudo: nothing prompts).
can_apt_install() { is_root && have apt-get && have dpkg; }

_APT_UPDATED=""
# apt_install PACKAGE...: install Debian packages non-interactively, refreshing the package lists
# once if the first attempt fails (a fresh machine may have none, or stale ones).
apt_install() {
    local log="$SETUP_LOG_DIR/apt-get.log"
    var_mkdir "$SETUP_LOG_DIR"
    step "Installing $* with apt-get"
    note "apt-get's output: ${log#"$TOOLROOM_ROOT"/}"
    export DEBIAN_FRONTEND=noninteractive
    # Another apt-get or dpkg may be running (unattended upgrades, a parallel set-up): wait for
    # its lock rather than fail.
    local apt=(apt-get -o DPkg::Lock::Timeout=300)
    if "${apt[@]}" install -y --no-install-recommends "$@" </dev/null >>"$log" 2>&1; then
        return 0
    fi
    if [[ -z "$_APT_UPDATED" ]]; then
        _APT_UPDATED=1
        note "refreshing the package lists (apt-get update) and trying again"
        if "${apt[@]}" update </dev/null >>"$log" 2>&1 &&
            "${apt[@]}" install -y --no-install-recommends "$@" </dev/null >>"$log" 2>&1; then
            return 0
        fi
    fi
    tail -n 20 "$log" >&2
    die "apt-get install $* failed; the last lines are above, the whole log is ${log#"$TOOLROOM_ROOT"/}."
}

# require_package WHAT DEBIAN_PACKAGE ELSEWHERE: install a missing tool on Debian as root, or stop
# at once naming what to install.
require_package() {
    local what="$1" package="$2" elsewhere="$3"
    if can_apt_install; then
        apt_install "$package"
        return 0
    fi
    if have apt-get; then
        die "$what is needed and missing. Install it with:  sudo apt-get install $package" \
            "then run this command again."
    fi
    die "$what is needed and missing. Install it ($elsewhere), then run this command again."
}

# --- Network -----------------------------------------------------------------------------------

# with_timeout SECONDS COMMAND...: coreutils' timeout where there is one (macOS has none by default).
with_timeout() {
    local seconds="$1"
    shift
    if have timeout; then
        timeout "$seconds" "$@"
    else
        "$@"
    fi
}

# tcp_open HOST PORT: true if something accepts a TCP connection there within two seconds.
tcp_open() {
    local host="$1" port="$2"
    host="${host#[}"
    host="${host%]}"
    # shellcheck disable=SC2016 # expanded by the inner bash, from its arguments
    with_timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" 2>/dev/null
}

is_local_host() {
    case "$1" in
    "" | 127.0.0.1 | localhost | ::1 | "[::1]") return 0 ;;
    *) return 1 ;;
    esac
}

# wait_until SECONDS COMMAND...: retry COMMAND every 0.2 s until it succeeds or time runs out.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}
