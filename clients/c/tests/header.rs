//! Proves the checked-in C header `include/ferrite.h` is exactly what cbindgen generates from the
//! code today, so a change to an exported function, type or doc comment cannot ship with a stale
//! header. With `FERRITE_BLESS=1` it rewrites the header instead of comparing.

use std::path::Path;

const REGENERATE: &str = "FERRITE_BLESS=1 cargo test -p ferrite-c --test header";

fn generate() -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    // `with_src` parses our sources directly (following `mod` declarations) instead of asking
    // `cargo metadata` about the whole workspace: faster, and independent of the other crates.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut header = Vec::new();
    bindings.write(&mut header);
    String::from_utf8(header).expect("the header is UTF-8")
}

#[test]
fn checked_in_header_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ferrite.h");
    let generated = generate();
    if std::env::var_os("FERRITE_BLESS").is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).expect("write include/ferrite.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(old, new)| old != new)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()))
            + 1;
        panic!(
            "{} is out of date with the Rust code (first difference at line {line}).\n\
             Regenerate it with `{REGENERATE}`, review the diff and commit it.",
            path.display()
        );
    }
}

/// The header's promises that C and C++ users rely on, checked on the generated text so that a
/// configuration change cannot drop them unnoticed.
#[test]
fn header_has_guards_docs_and_the_whole_api() {
    let header = generate();
    assert!(header.contains("#ifndef FERRITE_H") && header.contains("#define FERRITE_H"), "include guard");
    assert!(header.contains("extern \"C\" {"), "C++ extern \"C\" guard");
    assert!(header.contains("    // Success.\n    FERRITE_OK = 0,"), "doc comments");
    assert!(header.contains("FERRITE_KEY_NOT_FOUND = 13,"), "statuses carry the wire numbers");
    for function in [
        "ferrite_connect",
        "ferrite_session_close",
        "ferrite_pool_create",
        "ferrite_pool_open",
        "ferrite_pool_close",
        "ferrite_pool_delete",
        "ferrite_pool_list",
        "ferrite_pool_info_list_free",
        "ferrite_put",
        "ferrite_get",
        "ferrite_get_into",
        "ferrite_erase",
        "ferrite_count",
        "ferrite_find",
        "ferrite_key_list_free",
        "ferrite_invoke",
        "ferrite_invoke_put",
        "ferrite_response_list_free",
        "ferrite_put_async",
        "ferrite_get_async",
        "ferrite_erase_async",
        "ferrite_op_poll",
        "ferrite_op_wait",
        "ferrite_op_result_buffer",
        "ferrite_op_free",
        "ferrite_buffer_free",
        "ferrite_last_error",
        "ferrite_status_name",
        "ferrite_version",
    ] {
        let declared = [" ", "*"].iter().any(|before| header.contains(&format!("{before}{function}(")));
        assert!(declared, "{function} is declared");
    }
}
