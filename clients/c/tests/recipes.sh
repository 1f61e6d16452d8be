#!/usr/bin/env bash
# The recipes the C client's documentation gives, run as the documentation writes them, so a
# recipe that does not work (a missing step, a renamed file, an option that changed) fails here:
#
#   clients/c/tests/recipes.sh ADDRESS      # ADDRESS: a running server's native address
#
# Each recipe is the fenced block of the document that contains a given line; the commands run
# from a scratch directory that sees the repository's `clients`, `examples` and `target`, so the
# programs they build land there, with HOME in it too. From examples/c/README.md: building
# libferrite, installing it under "$HOME/.local" and building both examples with pkg-config, the
# same from the build tree, and statically; each build's programs are then run as its "Run"
# block says (against ADDRESS: the block's own first line, which starts a server on the default
# port, is the one not run). From docs/clients.md: its C example program, built as
# "Installation" says (into a scratch prefix, not /usr/local) and from the build tree.
#
# Before the recipes, the build tree's SONAME link is removed, so they find it as a fresh build
# leaves it. `make test` builds the debug profile only, so the recipes' release paths and flags
# are read as debug ones (`cargo build --release` as `cargo build`, `target/release` as
# `target/debug`, `install.sh` with `--profile debug`); RECIPE_PROFILE=release runs them
# unchanged, building the release library.
set -euo pipefail

address=${1:?usage: recipes.sh ADDRESS}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
profile=${RECIPE_PROFILE:-debug}
target_root=${CARGO_TARGET_DIR:-$repo/target}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ferrite-c-recipes.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
ln -s "$repo/clients" "$repo/examples" "$scratch/"
ln -s "$target_root" "$scratch/target"
mkdir "$scratch/home"

# fenced FILE LANG: every ```LANG block of FILE, each followed by an ASCII record separator.
fenced() {
    awk -v open='```'"$2" '
        inside && /^```/ { inside = 0; printf "\036"; next }
        !inside && $0 == open { inside = 1; next }
        inside { print }
    ' "$1"
}

# recipe FILE LANG LINE: the one ```LANG block of FILE that has LINE in it (a fixed string),
# with the release profile read as RECIPE_PROFILE's.
recipe() {
    local file=$1 lang=$2 line=$3 block found=()
    while IFS= read -r -d $'\036' block; do
        [[ $block == *"$line"* ]] && found+=("$block")
    done < <(fenced "$repo/$file" "$lang")
    if [[ ${#found[@]} -ne 1 ]]; then
        echo "recipes.sh: $file has ${#found[@]} \`\`\`$lang blocks with '$line', expected one" >&2
        return 1
    fi
    if [[ $profile == release ]]; then
        printf '%s\n' "${found[0]}"
    else
        printf '%s\n' "${found[0]}" | sed -e 's/cargo build --release/cargo build/' \
            -e 's|target/release|target/debug|g' -e 's|install\.sh --prefix|install.sh --profile debug --prefix|'
    fi
}

# run_recipe FILE LANG LINE: runs that recipe with bash from the scratch directory, echoing it.
run_recipe() {
    local text
    text=$(recipe "$@")
    printf '\n-- %s: the recipe with "%s"\n%s\n' "$1" "$3" "$text"
    (cd "$scratch" && HOME=$scratch/home bash -euo pipefail -c "$text")
}

# The recipes' `cargo` runs from the repository (the scratch directory is no workspace).
export FERRITE_REPO=$repo
# The recipes get a HOME of their own: cargo and rustup keep finding the user's.
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
cargo() { (cd "$FERRITE_REPO" && command "${CARGO:-cargo}" "$@"); }
export -f cargo

# run_examples: runs the examples/c/README.md "Run" block's programs against ADDRESS.
run_examples() {
    local text
    text=$(recipe examples/c/README.md sh './basic 127.0.0.1:11911' | grep -v 'ferrite-server')
    text=${text//127.0.0.1:11911/$address}
    printf '\n-- examples/c/README.md: running\n%s\n' "$text"
    (cd "$scratch" && bash -euo pipefail -c "$text")
}

soname=$(objdump -p "$target_root/$profile/libferrite.so" | awk '$1 == "SONAME" { print $2 }')
rm -f "$target_root/$profile/$soname"

run_recipe examples/c/README.md sh 'cargo build --release -p ferrite-c'
run_recipe examples/c/README.md sh 'clients/c/install.sh --prefix "$HOME/.local"'
run_examples
rm -f "$target_root/$profile/$soname"
run_recipe examples/c/README.md sh '-L target/release -lferrite'
run_examples
run_recipe examples/c/README.md sh 'target/release/libferrite.a'
run_examples

# docs/clients.md's example program, as app.c: it connects to the default address, read as ADDRESS.
example=$(fenced "$repo/docs/clients.md" c)
[[ -n $example ]] || { echo "recipes.sh: docs/clients.md has no \`\`\`c example" >&2; exit 1; }
printf '%s' "${example//127.0.0.1:11911/$address}" | tr -d '\036' >"$scratch/app.c"
install_recipe=$(recipe docs/clients.md sh 'clients/c/install.sh --prefix /usr/local')
printf '\n-- docs/clients.md: the recipe with "clients/c/install.sh" (PREFIX /usr/local read as a scratch prefix)\n%s\n' \
    "$install_recipe"
(
    cd "$scratch"
    prefix=$scratch/usr-local
    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    bash -euo pipefail -c "${install_recipe//\/usr\/local/$prefix}"
    LD_LIBRARY_PATH=$prefix/lib ./app
)
rm -f "$target_root/$profile/$soname" "$scratch/app"
run_recipe docs/clients.md sh '-L target/release -lferrite'
(cd "$scratch" && ./app)
echo "the C client's documented recipes work"
