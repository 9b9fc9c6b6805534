# shellcheck shell=bash
# Shared settings for the vblk-uring scripts.  Sourced, never run.

set -euo pipefail

VBLK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VBLK_BUILD=${VBLK_BUILD:-$VBLK_ROOT/build}
VBLK_CACHE=${VBLK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vblk-uring}

# The pinned upstream: Debian's source package of QEMU 10.2.2.
QEMU_VERSION=10.2.2
QEMU_DEB_VERSION=1:10.2.2+ds-1
QEMU_ORIG=qemu_10.2.2+ds.orig.tar.xz
QEMU_ORIG_SHA256=be05230fe47a6937cd29f28f562932c8125f9c93c2a82c625198f7a4aa601dfb
QEMU_DEBIAN=qemu_10.2.2+ds-1.debian.tar.xz
QEMU_DEBIAN_SHA256=ddf75aceab4f8f77374f3cb34fc97b41514895aeb293ce8b2ddd5e072bb0f5c0
# Debian's own build fixes for its firmware-less repack, applied to the
# pristine base of both trees (ours and the stock baseline).
QEMU_DEBIAN_PATCHES="skip-unpack-edk2-blobs.patch skip-install-dtb.patch"

# Trixie's meson (QEMU 10.2 needs >= 1.5; bookworm has 1.0.1) and pycotap.
MESON_DEB=meson_1.7.0-1_all.deb
MESON_DEB_SHA256=e92d04e60e784336883d537755d09b7dcb856809fa318a0931df3898e84ded95
PYCOTAP_DEB=python3-pycotap_1.3.1-2_all.deb
PYCOTAP_DEB_SHA256=7e8dbf3ac06434275a461d0de79792e2b80126febc53866c89027adde5192ac9

# Pre-downloaded copies of the files above, used when Debian's archive no
# longer serves these versions.  A sibling shared/cache is used by default.
if [ -z "${VBLK_DEB_CACHE:-}" ] && [ -d "$VBLK_ROOT/../shared/cache" ]; then
    VBLK_DEB_CACHE=$(cd "$VBLK_ROOT/../shared/cache" && pwd)
fi
VBLK_DEB_CACHE=${VBLK_DEB_CACHE:-}

# Assembled trees: ours (pristine + patches/ + our files), the stock
# baseline (pristine only), and the series as posted, one commit per patch
# with our files in the patches that bring them (scripts/qemu-tree post).
tree_dir() {
    case "$1" in
    vblk) echo "$VBLK_BUILD/qemu" ;;
    stock) echo "$VBLK_BUILD/qemu-stock" ;;
    series) echo "$VBLK_BUILD/qemu-series" ;;
    *) die "unknown tree '$1' (vblk, stock or series)" ;;
    esac
}

BASE_TAG=pristine

say() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

check_sha256() {
    local file=$1 want=$2 got
    got=$(sha256sum "$file" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        die "$file: sha256 $got, expected $want; refusing it"
    fi
}

# The Debian archive as this machine reaches it: the address its own apt
# sources give for Debian's main archive (a mirror, or a caching proxy
# such as apt-cacher-ng), or VBLK_DEBIAN_ARCHIVE.  apt's own settings
# (Acquire::http::Proxy and the like) apply as well.  Empty if none.
debian_archive() {
    if [ -n "${VBLK_DEBIAN_ARCHIVE:-}" ]; then
        printf '%s\n' "$VBLK_DEBIAN_ARCHIVE"
        return
    fi
    # Labelled Debian by its Release file, or else (lists not fetched
    # yet) the entry for this release's own suite
    # shellcheck disable=SC2016
    apt-get indextargets --format '$(TARGET_OF) $(LABEL) $(RELEASE) $(REPO_URI)' \
            2>/dev/null |
        awk -v codename="$(. /etc/os-release && echo "$VERSION_CODENAME")" '
            $1 != "deb" { next }
            $2 == "Debian" { print $4; found = 1; exit }
            $3 == codename && !own { own = $4 }
            END { if (!found && own) print own }'
}

# A private apt configuration, so that the machine's own sources stay as
# they are while we read sid's sources and trixie's packages.
private_apt() {
    local dir=$VBLK_CACHE/apt archive
    archive=$(debian_archive)
    if [ -z "$archive" ]; then
        say "no Debian archive in this machine's apt sources (set VBLK_DEBIAN_ARCHIVE)"
        return 1
    fi
    mkdir -p "$dir/lists/partial" "$dir/archives/partial"
    cat >"$dir/sources.list.new" <<EOS
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $archive sid main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $archive trixie main
EOS
    # Another archive than last time: its lists are not the ones we have
    if ! cmp -s "$dir/sources.list.new" "$dir/sources.list"; then
        rm -f "$dir/lists/.updated"
    fi
    mv "$dir/sources.list.new" "$dir/sources.list"
    PRIVATE_APT_OPTS=(
        -o "Dir::Etc::SourceList=$dir/sources.list"
        -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$dir/lists"
        -o "Dir::Cache::Archives=$dir/archives"
        -o APT::Get::List-Cleanup=0
        -o APT::Sandbox::User=root
    )
    if [ ! -e "$dir/lists/.updated" ] ||
       [ -n "$(find "$dir/lists/.updated" -mmin +1440)" ]; then
        apt-get "${PRIVATE_APT_OPTS[@]}" update -qq >&2 &&
            touch "$dir/lists/.updated"
    fi
}

# fetch_deb_file NAME SHA256 COMMAND...: make $VBLK_CACHE/NAME exist and
# match SHA256, running COMMAND in $VBLK_CACHE first, then falling back
# to $VBLK_DEB_CACHE/NAME.
fetch_deb_file() {
    local name=$1 sha=$2
    shift 2
    local dest=$VBLK_CACHE/$name
    mkdir -p "$VBLK_CACHE"
    if [ ! -f "$dest" ]; then
        (cd "$VBLK_CACHE" && "$@") >&2 || say "Debian's archive did not serve $name"
    fi
    if [ ! -f "$dest" ] && [ -n "$VBLK_DEB_CACHE" ] &&
       [ -f "$VBLK_DEB_CACHE/$name" ]; then
        say "using $VBLK_DEB_CACHE/$name"
        cp "$VBLK_DEB_CACHE/$name" "$dest"
    fi
    [ -f "$dest" ] || die "cannot obtain $name (set VBLK_DEB_CACHE to a directory holding it)"
    check_sha256 "$dest" "$sha"
}

# The upstream release tarball, for machines without Debian's archive
# (passed in through VBLK_QEMU_TARBALL).
QEMU_UPSTREAM=qemu-$QEMU_VERSION.tar.xz
QEMU_UPSTREAM_SHA256=784b296ff29c1417aa72323abcb2d2ea9ab9771724f577dcd785c3b04f21e176

# reserve_hugepages MIB: make at least MIB of free 2 MiB hugepages exist
# (root only; a no-op when enough are free).  Returns 1 if it cannot.
reserve_hugepages() {
    local want=$(($1 / 2)) free total
    free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null) || return 1
    [ "$free" -ge "$want" ] && return 0
    total=$(cat /proc/sys/vm/nr_hugepages)
    echo $((total + want - free)) >/proc/sys/vm/nr_hugepages 2>/dev/null || return 1
    free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
    [ "$free" -ge "$want" ]
}
