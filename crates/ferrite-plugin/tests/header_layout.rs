//! Proves the Rust mirror in `abi.rs` matches `ferrite_plugin.h` as the system C compiler lays
//! it out: every struct's size and alignment, every field's offset, and every constant.

mod support;

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use ferrite_plugin::abi::*;

/// One line the C program prints and the value Rust expects for it.
struct Expectation {
    c_expression: String,
    rust_value: i128,
}

/// Lists `sizeof`, `_Alignof` and every field's `offsetof` for a C struct and its Rust mirror
/// (whose fields have the same names).
macro_rules! layout {
    ($out:ident, $c:literal => $rust:ty { $($field:ident),* $(,)? }) => {
        $out.push(Expectation { c_expression: format!("sizeof({})", $c), rust_value: size_of::<$rust>() as i128 });
        $out.push(Expectation { c_expression: format!("_Alignof({})", $c), rust_value: align_of::<$rust>() as i128 });
        $(
            $out.push(Expectation {
                c_expression: format!("offsetof({}, {})", $c, stringify!($field)),
                rust_value: offset_of!($rust, $field) as i128,
            });
        )*
    };
}

macro_rules! constants {
    ($out:ident, $($c:literal => $rust:expr),* $(,)?) => {
        $( $out.push(Expectation { c_expression: $c.to_string(), rust_value: $rust as i128 }); )*
    };
}

fn expectations() -> Vec<Expectation> {
    let mut out = Vec::new();
    layout!(out, "ferrite_bytes" => Bytes { data, len });
    layout!(out, "ferrite_work" => Work {
        struct_size, flags, pool_id, key, value, value_len, value_offset, payload, detached,
        detached_len, detached_offset, layer, reserved,
    });
    layout!(out, "ferrite_pair" => Pair { key, value, value_len, value_offset, write_time_ns });
    layout!(out, "ferrite_pool_info" => PoolInfo { pool_id, size_bytes, used_bytes, objects, region_bytes });
    layout!(out, "ferrite_callbacks" => Callbacks {
        struct_size, reserved, declare_write, respond, create_key, open_key, erase_key,
        resize_value, allocate_memory, free_memory, iterate, get_reference_vector, find_key,
        pool_info, unlock, log,
    });
    layout!(out, "ferrite_plugin_v1" => PluginV1 {
        abi_version, struct_size, name, launch, do_work, pool_event, shutdown,
    });
    out.push(Expectation { c_expression: "sizeof(ferrite_pair_fn)".into(), rust_value: size_of::<PairFn>() as i128 });
    constants!(out,
        "FERRITE_PLUGIN_ABI_VERSION" => ABI_VERSION,
        "FERRITE_OK" => OK,
        "FERRITE_ERR_FAILED" => ERR_FAILED,
        "FERRITE_ERR_INVALID" => ERR_INVALID,
        "FERRITE_ERR_NOT_FOUND" => ERR_NOT_FOUND,
        "FERRITE_ERR_EXISTS" => ERR_EXISTS,
        "FERRITE_ERR_NO_SPACE" => ERR_NO_SPACE,
        "FERRITE_ERR_LOCKED" => ERR_LOCKED,
        "FERRITE_ERR_UNSUPPORTED" => ERR_UNSUPPORTED,
        "FERRITE_WORK_NEW_KEY" => WORK_NEW_KEY,
        "FERRITE_WORK_READ_ONLY" => WORK_READ_ONLY,
        "FERRITE_WORK_DETACHED" => WORK_DETACHED,
        "FERRITE_WORK_SIGNAL" => WORK_SIGNAL,
        "FERRITE_WORK_POOL" => WORK_POOL,
        "FERRITE_LOG_ERROR" => LOG_ERROR,
        "FERRITE_LOG_WARN" => LOG_WARN,
        "FERRITE_LOG_INFO" => LOG_INFO,
        "FERRITE_LOG_DEBUG" => LOG_DEBUG,
        "FERRITE_EVENT_OPEN" => EVENT_OPEN,
        "FERRITE_EVENT_CLOSE" => EVENT_CLOSE,
        "FERRITE_EVENT_ERASE" => EVENT_ERASE,
        "FERRITE_EVENT_RESIZE" => EVENT_RESIZE,
        "FERRITE_EVENT_DELETE" => EVENT_DELETE,
    );
    out
}

/// A C program printing each expression as a signed decimal, one per line.
fn c_program(expectations: &[Expectation]) -> String {
    let mut program =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include \"ferrite_plugin.h\"\nint main(void) {\n");
    for expectation in expectations {
        writeln!(program, "    printf(\"%lld\\n\", (long long)({}));", expectation.c_expression)
            .expect("writing to a String cannot fail");
    }
    program.push_str("    return 0;\n}\n");
    program
}

#[test]
fn rust_mirror_matches_the_header() {
    let expectations = expectations();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let source = dir.path().join("layout.c");
    let binary = dir.path().join("layout");
    std::fs::write(&source, c_program(&expectations)).expect("writing the C program");
    support::cc(&[source.as_os_str(), "-o".as_ref(), binary.as_os_str()]);

    let output = Command::new(&binary).output().expect("the layout program runs");
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).expect("the program prints ASCII");
    let c_values: Vec<i128> =
        printed.lines().map(|line| line.parse().expect("the program prints one integer a line")).collect();
    assert_eq!(c_values.len(), expectations.len());

    let mismatches: Vec<String> = expectations
        .iter()
        .zip(&c_values)
        .filter(|(expectation, c_value)| expectation.rust_value != **c_value)
        .map(|(expectation, c_value)| {
            format!("{}: C says {c_value}, Rust says {}", expectation.c_expression, expectation.rust_value)
        })
        .collect();
    assert!(mismatches.is_empty(), "the Rust mirror disagrees with the header:\n{}", mismatches.join("\n"));
}
