//! Building C code from the SDK's header with the system C compiler, for the tests that check
//! the C side of the ABI.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `ferrite_plugin.h`.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Runs `cc` with `args` (plus the header's directory on the include path) and fails the test
/// with the compiler's output if it does not succeed.
pub fn cc(args: &[&std::ffi::OsStr]) {
    let output = Command::new("cc")
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(include_dir())
        .args(args)
        .output()
        .expect("the system C compiler `cc` runs");
    assert!(output.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&output.stderr));
}
