#!/usr/bin/env bash
# Builds the Ferrite container image from this machine's files alone, for Docker engines that
# reach no registry: a root file system holding the built binaries (ferrite-server, ferrite,
# ferrite-ado), the shipped plugins beside the server, exactly the shared libraries and the dynamic
# loader they need (as ldd finds them, at the same paths), deploy/ferrite.toml, and a data
# directory owned by uid 10001; then `docker build` of deploy/docker/Dockerfile.offline over it
# (`FROM scratch`: nothing is pulled). Build the binaries first (`make build`, or `make image` for
# both steps). See docs/deployment.md, "A cluster in containers".
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: deploy/docker/build-image.sh [--profile release|debug] [--tag NAME[:TAG]]

  --profile  which cargo build to take the binaries from: target/release (default) or
             target/debug (debug information is stripped from the copies either way)
  --tag      the image's name (default ferrite:latest, as deploy/Dockerfile's build is named)
EOF
}

profile=release
tag=ferrite:latest
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=${2:?--profile needs release or debug}; shift 2 ;;
        --tag) tag=${2:?--tag needs a name}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; echo "build-image.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case "$profile" in
    release|debug) ;;
    *) echo "build-image.sh: --profile is release or debug, not '$profile'" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "$0")/../.." && pwd)
built=${CARGO_TARGET_DIR:-$repo/target}/$profile
for tool in docker ldd strip tar; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build-image.sh: '$tool' is not installed" >&2; exit 1; }
done

binaries=("$built/ferrite-server" "$built/ferrite" "$built/ferrite-ado")
shopt -s nullglob
plugins=("$built"/libferrite_plugin_*.so)
shopt -u nullglob
for file in "${binaries[@]}"; do
    if [ ! -x "$file" ]; then
        echo "build-image.sh: $file is missing: build it first (make build, or cargo build for --profile debug)" >&2
        exit 1
    fi
done
if [ ${#plugins[@]} -eq 0 ]; then
    echo "build-image.sh: no shipped plugins (libferrite_plugin_*.so) in $built: build them first (make build)" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ferrite-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
install -d -m 0755 "$rootfs/usr/local/bin" "$rootfs/etc/ferrite"
install -d -m 0750 "$rootfs/var/lib/ferrite"
install -d -m 1777 "$rootfs/tmp"

# The server starts the plugin host and loads the plugins from its own directory.
for file in "${binaries[@]}" "${plugins[@]}"; do
    strip --strip-debug -o "$rootfs/usr/local/bin/$(basename "$file")" "$file"
done

# Every library the binaries and plugins load, and the loader, at the paths the loader looks for
# them; ldd follows the dependencies of dependencies. A library it cannot find stops the build.
libraries=$(for file in "$rootfs"/usr/local/bin/*; do ldd "$file"; done | awk '
    / => not found/ { print "missing " $1; next }
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }' | sort -u)
if grep -q '^missing ' <<<"$libraries"; then
    echo "build-image.sh: libraries not found on this machine: $(sed -n 's/^missing //p' <<<"$libraries" | tr '\n' ' ')" >&2
    exit 1
fi
for library in $libraries; do
    install -d "$rootfs$(dirname "$library")"
    cp -L "$library" "$rootfs$library"
done

install -m 0644 "$repo/deploy/ferrite.toml" "$rootfs/etc/ferrite/ferrite.toml"
# Names for the numeric user, and host names looked up in /etc/hosts, then DNS (Docker's and
# Kubernetes' resolvers serve the other nodes' names).
printf 'root:x:0:0:root:/:/sbin/nologin\nferrite:x:10001:10001:Ferrite:/var/lib/ferrite:/sbin/nologin\n' \
    >"$rootfs/etc/passwd"
printf 'root:x:0:\nferrite:x:10001:\n' >"$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

# Everything belongs to root but the data directory, which the server (uid 10001) writes; a named
# volume mounted there starts with its owner.
context=$work/context
install -d "$context"
tar --create --file "$context/rootfs.tar" --directory "$rootfs" --numeric-owner --owner=0 --group=0 \
    --sort=name --exclude=./var/lib/ferrite .
tar --append --file "$context/rootfs.tar" --directory "$rootfs" --numeric-owner --owner=10001 --group=10001 \
    --no-recursion ./var/lib/ferrite
cp "$repo/deploy/docker/Dockerfile.offline" "$context/Dockerfile"

docker build --quiet --tag "$tag" "$context" >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$tag")
echo "built $tag from $built: $((size / 1024 / 1024)) MiB"
