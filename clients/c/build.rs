//! Gives libferrite.so its SONAME, so a program linked against it records the ABI it was built
//! for (`libferrite.so.0.2` for 0.2.x: before 1.0 a minor release may change the ABI), and the
//! loader refuses a later, incompatible library instead of calling it wrongly. `install.sh`
//! installs the library under that name, with `libferrite.so` as the link for `-lferrite`.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the package version");
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").expect("cargo sets the package version");
    let abi = if major == "0" { format!("0.{minor}") } else { major };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libferrite.so.{abi}");
    println!("cargo:rerun-if-changed=build.rs");
}
