#!/usr/bin/env bash
# The C client's test, end to end, from the repository root or anywhere:
#
#   clients/c/tests/run.sh
#
# 1. builds libferrite and what the tests talk to (the server, its plugin host, the counter
#    plugin, and the `ferrite` command for the users file);
# 2. starts two servers on loopback with free ports: a plain one (direct values up to 8 MiB),
#    and one with mutual TLS and users (certificates made here with openssl); and a three-node
#    cluster (`ferrite cluster local`);
# 3. compiles tests/test_ferrite.c with gcc against libferrite.so and runs it;
# 4. runs it again built with AddressSanitizer (and LeakSanitizer) against libferrite.a: no
#    invalid access in C, and no leak of anything the library handed out, Rust allocations
#    included (both share malloc);
# 5. runs the shared-library build under valgrind, which also sees inside the Rust code:
#    no invalid access and no definite or possible leak (tests/valgrind.supp holds the one
#    false positive, in TLS encryption, with the evidence for it);
# 6. installs libferrite into a temporary prefix with clients/c/install.sh, then builds
#    examples/c/basic.c and basic.cpp with `pkg-config --cflags --libs ferrite` (warnings as
#    errors) and runs them;
# 7. runs the recipes of examples/c/README.md and docs/clients.md as they are written
#    (tests/recipes.sh): install and build, build from the build tree, link statically, run;
# 8. stops the servers by their pids.
#
# Exits non-zero on any failure. Needs gcc, g++, valgrind, openssl and pkg-config (all in the
# project's machine image). CARGO, CC and CXX may override the tools.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
cc=${CC:-gcc}
cxx=${CXX:-g++}
bin=${CARGO_TARGET_DIR:-$repo/target}/debug

for tool in "$cc" "$cxx" valgrind openssl pkg-config; do
    command -v "$tool" >/dev/null 2>&1 || { echo "run.sh: $tool is required but not installed" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ferrite-c-test.XXXXXX")
server_pids=()
stop_servers() {
    for pid in "${server_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    server_pids=()
}
cleanup() {
    stop_servers
    rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

step "building libferrite, the server, the plugin host, the counter plugin and the ferrite command"
"$cargo" build -p ferrite-c -p ferrite-server -p ferrite-ado -p ferrite-plugin-counter -p ferrite-cli

step "making a CA, a server certificate for 127.0.0.1, a client certificate, and a users file"
tls=$work/tls
mkdir -p "$tls"
openssl_quiet() { openssl "$@" 2>"$tls/openssl.err" || { cat "$tls/openssl.err" >&2; return 1; }; }
new_key() { openssl_quiet genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
new_key "$tls/ca-key.pem"
openssl_quiet req -x509 -new -key "$tls/ca-key.pem" -out "$tls/ca.pem" -days 2 -subj "/CN=ferrite C test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
# sign NAME SUBJECT EXTENSIONS: a key and a certificate signed by the CA.
sign() {
    new_key "$tls/$1-key.pem"
    openssl_quiet req -new -key "$tls/$1-key.pem" -out "$tls/$1.csr" -subj "$2"
    printf '%b' "$3" >"$tls/$1.ext"
    openssl_quiet x509 -req -in "$tls/$1.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial \
        -out "$tls/$1.pem" -days 2 -extfile "$tls/$1.ext"
}
sign server "/CN=127.0.0.1" "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
sign client "/CN=ferrite C test client" "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
test_user=c-tester
test_password=c-test-password-$$
printf '%s\n' "$test_password" | "$bin/ferrite" user add "$test_user" --file "$work/users.toml" >/dev/null
"$bin/ferrite" user grant "$test_user" 'secure*' all --file "$work/users.toml" >/dev/null

# start_server NAME ARGS...: starts a two-shard server and sets $server_address to shard 0's
# native address, read from the `shard 0: native HOST:PORT` line it prints once it listens.
start_server() {
    local name=$1
    shift
    "$bin/ferrite-server" --listen 127.0.0.1:0 --shards 2 --data-dir "$work/$name-data" --log-level warn "$@" \
        >"$work/$name.out" 2>"$work/$name.err" &
    local pid=$!
    server_pids+=("$pid")
    server_address=
    for _ in $(seq 300); do
        server_address=$(sed -n 's/^shard 0: native //p' "$work/$name.out")
        [[ -n $server_address ]] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run.sh: the $name server exited before it listened:" >&2
            cat "$work/$name.err" >&2
            return 1
        fi
        sleep 0.1
    done
    [[ -n $server_address ]] || { echo "run.sh: the $name server announced no address in 30 s" >&2; return 1; }
    echo "$name server (pid $pid) at $server_address"
}

step "starting the servers"
# The plain server takes direct values up to 8 MiB, so the test passes that limit cheaply.
direct_max=$((8 << 20))
printf '[limits]\ndirect_value_bytes_max = %d\n' "$direct_max" >"$work/plain.toml"
start_server plain --config "$work/plain.toml"
plain_address=$server_address
start_server secure --tls-cert "$tls/server.pem" --tls-key "$tls/server-key.pem" --tls-client-ca "$tls/ca.pem" \
    --users "$work/users.toml"
secure_address=$server_address

# A three-node cluster on loopback (`ferrite cluster local`), for the redirection test; its
# command stops every node on SIGTERM.
"$bin/ferrite" cluster local --nodes 3 --data-dir "$work/cluster" >"$work/cluster.out" 2>"$work/cluster.err" &
server_pids+=("$!")
for _ in $(seq 600); do
    grep -qx 'Ctrl-C stops every node.' "$work/cluster.out" && break
    kill -0 "${server_pids[-1]}" 2>/dev/null || { cat "$work/cluster.err" >&2; exit 1; }
    sleep 0.1
done
grep -qx 'Ctrl-C stops every node.' "$work/cluster.out" ||
    { echo "run.sh: cluster local was not ready in 60 s" >&2; cat "$work/cluster.err" >&2; exit 1; }
cluster_addresses=$(sed -n 's/^node [0-9]*: native \([^ ]*\) .*/\1/p' "$work/cluster.out" | paste -sd,)
echo "cluster (pid ${server_pids[-1]}) at $cluster_addresses"

export FERRITE_TEST_ADDR=$plain_address
export FERRITE_TEST_CLUSTER_ADDRS=$cluster_addresses
export FERRITE_TEST_DIRECT_MAX=$direct_max
export FERRITE_TEST_TLS_ADDR=$secure_address
export FERRITE_TEST_CA=$tls/ca.pem
export FERRITE_TEST_CLIENT_CERT=$tls/client.pem
export FERRITE_TEST_CLIENT_KEY=$tls/client-key.pem
export FERRITE_TEST_USER=$test_user
export FERRITE_TEST_PASSWORD=$test_password

cflags=(-std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -g -I clients/c/include)
test_source=clients/c/tests/test_ferrite.c

step "the C test against libferrite.so"
# The test records the library's SONAME (libferrite.so.0.2 for 0.2.x) and the loader looks for
# that name in the rpath: cargo builds only libferrite.so, so the SONAME is linked to it, as
# install.sh does in a prefix.
soname=$(objdump -p "$bin/libferrite.so" | awk '$1 == "SONAME" { print $2 }')
[[ $soname == libferrite.so.* ]] || { echo "run.sh: libferrite.so has no SONAME (found '$soname')" >&2; exit 1; }
ln -sfn libferrite.so "$bin/$soname"
"$cc" "${cflags[@]}" "$test_source" -o "$work/test_ferrite" -L "$bin" -lferrite -Wl,-rpath,"$bin" -pthread
needed=$(objdump -p "$work/test_ferrite" | awk '$1 == "NEEDED" && $2 ~ /^libferrite/ { print $2 }')
[[ $needed == "$soname" ]] || { echo "run.sh: the test needs '$needed', not the SONAME $soname" >&2; exit 1; }
"$work/test_ferrite"

step "the C test with AddressSanitizer and LeakSanitizer, against libferrite.a"
"$cc" "${cflags[@]}" -fsanitize=address -fno-omit-frame-pointer "$test_source" -o "$work/test_ferrite_asan" \
    "$bin/libferrite.a" -pthread -ldl -lm -lrt -lutil -lgcc_s
ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 "$work/test_ferrite_asan"

step "the C test under valgrind (leaks and invalid accesses, Rust code included)"
# --num-callers=40: suppressions match on the recorded stack, and the one frame that identifies a
# TLS write (valgrind.supp) lies deeper than the default 12.
if valgrind --leak-check=full --errors-for-leak-kinds=definite,possible --show-leak-kinds=definite,possible \
    --num-callers=40 --suppressions=clients/c/tests/valgrind.supp -s --error-exitcode=1 \
    --log-file="$work/valgrind.log" "$work/test_ferrite"; then
    grep -hE "ERROR SUMMARY|definitely lost|possibly lost|used_suppression" "$work/valgrind.log" \
        | sed -E 's/^(==|--)[0-9]+(==|--) *//' | sort -u
else
    cat "$work/valgrind.log" >&2
    echo "run.sh: valgrind found errors (above)" >&2
    exit 1
fi

step "installing into a temporary prefix and building the examples with pkg-config"
clients/c/install.sh --prefix "$work/prefix" --profile debug --no-build
[[ -L $work/prefix/lib/$soname && -L $work/prefix/lib/libferrite.so ]] \
    || { echo "run.sh: install.sh did not link $soname and libferrite.so to the library" >&2; exit 1; }
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
flags_text=$(pkg-config --cflags --libs ferrite)
echo "pkg-config --cflags --libs ferrite: $flags_text"
read -r -a ferrite_flags <<<"$flags_text"
"$cc" -std=c11 -Wall -Wextra -Werror examples/c/basic.c "${ferrite_flags[@]}" -Wl,-rpath,"$work/prefix/lib" \
    -o "$work/basic"
"$cxx" -std=c++17 -Wall -Wextra -Werror examples/c/basic.cpp "${ferrite_flags[@]}" -Wl,-rpath,"$work/prefix/lib" \
    -o "$work/basic_cpp"

step "examples/c/basic.c"
"$work/basic" "$plain_address"
step "examples/c/basic.cpp"
"$work/basic_cpp" "$plain_address"

step "the recipes of examples/c/README.md and docs/clients.md, as written"
clients/c/tests/recipes.sh "$plain_address"

step "stopping the servers"
stop_servers
echo "C client: all checks passed"
