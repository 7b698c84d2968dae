# Sourced by scripts/libtorch2.sh and scripts/cuda-build-check.sh: a Debian
# 13 ("trixie") root made with debootstrap, kept outside the work tree and
# reused, with the work tree bind-mounted at its own path.
#
#   source scripts/debian13-root.sh
#   root_open ROOT REPO        # debootstrap when absent; mounts, undone on exit
#   root_install ROOT PKG...   # apt-get install of what is missing
#   in_root ROOT CMD...        # runs CMD inside, with a clean environment
#
# Needs root (debootstrap, mount, chroot) and Debian's archive, reached as
# the machine's own apt reaches it (host_debian_mirror).

# The Debian archive this machine's apt uses: the first source (in
# APT_DIR/sources.list, then sources.list.d/*.list and *.sources in name
# order, one-line and deb822 formats alike) of type deb whose suite is a
# Debian release (bookworm, trixie, sid, stable, ... and not -security,
# -updates or -backports, which are other archives). Prints its URI, or
# deb.debian.org's with a note on stderr when there is none.
host_debian_mirror() {  # host_debian_mirror [APT_DIR]
  local apt=${1:-/etc/apt} files=() f uri
  [[ -f $apt/sources.list ]] && files+=("$apt/sources.list")
  for f in "$apt"/sources.list.d/*.list "$apt"/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  uri=$(awk '
    function release(suite) {
      return suite ~ /^(buster|bullseye|bookworm|trixie|forky|sid|oldstable|stable|testing|unstable)$/
    }
    function stanza(   n, s, j) {  # a deb822 stanza ends: is it the archive?
      if (type ~ /[[:space:]]deb([[:space:]]|$)/ && uris != "") {
        n = split(suites, s, /[[:space:]]+/)
        for (j = 2; j <= n; j++) if (release(s[j])) { print uris; found = 1; exit }
      }
      type = ""; uris = ""; suites = ""
    }
    FNR == 1 { stanza() }
    /^[[:space:]]*#/ { next }
    /^[[:space:]]*$/ { stanza(); next }
    /^deb[[:space:]]/ {  # one-line: deb [options] URI SUITE COMPONENT...
      i = 2
      if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if (release($(i + 1))) { print $i; found = 1; exit }
      next
    }
    /^Types:/ { type = $0 }
    /^URIs:/ { uris = $2 }
    /^Suites:/ { suites = $0 }
    END { if (!found) stanza() }
  ' "${files[@]}" /dev/null)
  if [[ -z $uri ]]; then
    echo "debian13-root: no Debian archive among $apt's sources; using http://deb.debian.org/debian (set DDP_DEBIAN_MIRROR to choose)" >&2
    uri=http://deb.debian.org/debian
  fi
  echo "${uri%/}"
}

root_mirror=${DDP_DEBIAN_MIRROR:-$(host_debian_mirror)}
root_mounted=()

root_close() {
  local i
  for (( i = ${#root_mounted[@]} - 1; i >= 0; i-- )); do
    umount "${root_mounted[i]}" 2>/dev/null || umount -l "${root_mounted[i]}" || true
  done
  root_mounted=()
}

root_open() {  # root_open ROOT REPO
  local root=$1 repo=$2 dir
  [[ "$(id -u)" -eq 0 ]] || { echo "error: making the Debian 13 root needs root" >&2; return 2; }
  if [[ ! -x "$root/usr/bin/apt-get" ]]; then
    if ! command -v debootstrap >/dev/null; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
    fi
    echo "making a Debian 13 root in $root (debootstrap, about a minute)"
    mkdir -p "$root"
    if ! debootstrap --variant=minbase trixie "$root" "$root_mirror" >"$root.debootstrap.log" 2>&1; then
      tail -n 20 "$root.debootstrap.log" >&2
      return 1
    fi
  fi
  trap root_close EXIT
  # The machine's own names, so that its host name resolves inside as it does
  # outside (torchrun's rendezvous gives workers the node's name as
  # MASTER_ADDR; debootstrap's hosts file knows only localhost).
  cp /etc/hosts "$root/etc/hosts"
  for dir in /proc /dev /dev/shm "$repo"; do
    mkdir -p "$root$dir"
    if ! mountpoint -q "$root$dir"; then
      mount --bind "$dir" "$root$dir"
      root_mounted+=("$root$dir")
    fi
  done
}

in_root() {  # in_root ROOT CMD...
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

# Installs the packages not yet installed. Returns apt-get's status; the
# caller decides what a partial install means (see cuda-build-check.sh).
root_install() {  # root_install ROOT PKG...
  local root=$1 p missing=()
  shift
  for p in "$@"; do
    in_root "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "installing into $root: ${missing[*]}"
  echo "deb $root_mirror trixie main contrib non-free non-free-firmware" >"$root/etc/apt/sources.list"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  in_root "$root" apt-get update -qq || return 1
  local status=0
  in_root "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$root/var/log/ddp-install.log" 2>&1 || status=$?
  in_root "$root" apt-get clean
  [[ $status -eq 0 ]] || tail -n 30 "$root/var/log/ddp-install.log" >&2
  return $status
}
