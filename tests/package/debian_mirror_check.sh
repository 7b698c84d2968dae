#!/usr/bin/env bash
# Core.Package.DebianRootTakesTheHostsMirror: scripts/debian13-root.sh takes
# the Debian 13 root's mirror from the machine's own apt sources
# (host_debian_mirror), in both formats, skipping other archives, and
# DDP_DEBIAN_MIRROR still overrides it. Prints one line per named check.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    echo "ok: $1 ($3)"
  else
    echo "FAILED: $1: expected '$2', got '$3'"
    failures=$((failures + 1))
  fi
}
mirror_of() {  # mirror_of APT_DIR: what a fresh shell that sources the script picks
  bash -c "source '$repo/scripts/debian13-root.sh'; host_debian_mirror '$1'" 2>"$work/stderr"
}

# deb822, as Debian 12 installs it, after a third-party source and the
# security archive (which must not be taken).
mkdir -p "$work/a/sources.list.d"
cat >"$work/a/sources.list.d/0-nodesource.sources" <<'SOURCES'
Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
SOURCES
cat >"$work/a/sources.list.d/debian.sources" <<'SOURCES'
Types: deb
URIs: http://security.example.org/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
# a comment inside the stanza
Components: main contrib
URIs: http://mirror.example.org/debian/
Suites: bookworm bookworm-updates
SOURCES
check "deb822: the release's archive, not security's or a third party's" \
  http://mirror.example.org/debian "$(mirror_of "$work/a")"

# One-line format with options, after a -backports line.
mkdir -p "$work/b"
cat >"$work/b/sources.list" <<'SOURCES'
# deb http://commented.example.org/debian bookworm main
deb http://backports.example.org/debian bookworm-backports main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.fr.debian.org/debian trixie main
SOURCES
check "one-line: the first release line, options skipped" \
  http://ftp.fr.debian.org/debian "$(mirror_of "$work/b")"

# No Debian archive at all: deb.debian.org, said on stderr.
mkdir -p "$work/c/sources.list.d"
echo "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main" \
  >"$work/c/sources.list.d/google.list"
check "no Debian archive: deb.debian.org" http://deb.debian.org/debian "$(mirror_of "$work/c")"
check "no Debian archive: a note names the apt directory" 1 \
  "$(grep -c "no Debian archive among $work/c" "$work/stderr")"

# DDP_DEBIAN_MIRROR still decides.
check "DDP_DEBIAN_MIRROR overrides the host's" http://override.example.org/debian \
  "$(DDP_DEBIAN_MIRROR=http://override.example.org/debian bash -c \
    "source '$repo/scripts/debian13-root.sh'; echo \$root_mirror")"

[[ $failures -eq 0 ]] && echo "all checks passed" || exit 1
