#!/usr/bin/env bash
# Installs libferrite (the C client): the header, the shared and static libraries, and a
# pkg-config file made from ferrite.pc.in with the paths filled in.
#
#   clients/c/install.sh [--prefix DIR] [--libdir DIR] [--profile release|debug] [--no-build]
#
# Defaults: --prefix /usr/local, --libdir PREFIX/lib, --profile release (built here with cargo
# unless --no-build). Afterwards, with PREFIX/lib/pkgconfig on PKG_CONFIG_PATH if it is not a
# system directory:
#
#   cc app.c $(pkg-config --cflags --libs ferrite)            # against libferrite.so
#   cc app.c $(pkg-config --cflags --libs --static ferrite)   # add PREFIX/lib/libferrite.a instead
#
# DESTDIR is honoured, as packagers expect: files go under $DESTDIR$PREFIX while ferrite.pc names
# $PREFIX.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix=/usr/local
libdir=
profile=release
build=1

while [[ $# -gt 0 ]]; do
    case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --libdir) libdir=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case $profile in
    release|debug) ;;
    *) echo "install.sh: --profile must be release or debug" >&2; exit 2 ;;
esac
libdir=${libdir:-$prefix/lib}
includedir=$prefix/include
cargo=${CARGO:-cargo}

if [[ $build == 1 ]]; then
    if [[ $profile == release ]]; then
        (cd "$repo" && "$cargo" build --release -p ferrite-c)
    else
        (cd "$repo" && "$cargo" build -p ferrite-c)
    fi
fi

target=${CARGO_TARGET_DIR:-$repo/target}/$profile
for file in "$target/libferrite.so" "$target/libferrite.a"; do
    [[ -f $file ]] || { echo "install.sh: $file is missing: build with cargo first" >&2; exit 1; }
done
# The version of the ferrite-c package, e.g. "0.1.0", as the pkg-config file's Version.
version=$(cd "$repo" && "$cargo" pkgid -p ferrite-c | sed 's/.*[#@]//')

destdir=${DESTDIR:-}
install -d "$destdir$includedir" "$destdir$libdir" "$destdir$libdir/pkgconfig"
install -m 0644 "$here/include/ferrite.h" "$destdir$includedir/ferrite.h"
# The shared library under its full version, the SONAME programs record (build.rs: libferrite.so.0.2
# for 0.2.x, libferrite.so.MAJOR from 1.0) as a link to it, and libferrite.so for `-lferrite`.
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
if [[ $major == 0 ]]; then abi=0.$minor; else abi=$major; fi
install -m 0755 "$target/libferrite.so" "$destdir$libdir/libferrite.so.$version"
ln -sfn "libferrite.so.$version" "$destdir$libdir/libferrite.so.$abi"
ln -sfn "libferrite.so.$abi" "$destdir$libdir/libferrite.so"
install -m 0644 "$target/libferrite.a" "$destdir$libdir/libferrite.a"
# `|` as the sed delimiter: paths contain slashes. A path with `|` or `&` is refused rather than
# silently garbled.
for value in "$prefix" "$libdir" "$includedir"; do
    [[ $value != *[\|\&]* ]] || { echo "install.sh: paths must not contain | or &: $value" >&2; exit 2; }
done
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$includedir|g" \
    -e "s|@VERSION@|$version|g" "$here/ferrite.pc.in" >"$destdir$libdir/pkgconfig/ferrite.pc"
chmod 0644 "$destdir$libdir/pkgconfig/ferrite.pc"

echo "installed libferrite $version ($profile) under $destdir$prefix:"
echo "  $includedir/ferrite.h"
echo "  $libdir/libferrite.so.$version (and the links libferrite.so.$abi, libferrite.so), $libdir/libferrite.a"
echo "  $libdir/pkgconfig/ferrite.pc"
