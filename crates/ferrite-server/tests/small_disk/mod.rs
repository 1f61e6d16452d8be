//! A server whose data directory is on a small tmpfs, mounted in a private mount namespace (so
//! no privileges beyond an unprivileged user namespace are needed), with ballast taking part of
//! it: writes fill the disk until the log has no room, and removing the ballast gives room back.
//! Where user namespaces are not available, [`available`] says so and the test skips. Only this
//! crate's tests use it: it runs the server binary Cargo names for them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{ServerBuilder, TestServer};

/// The tmpfs's size.
pub const TMPFS_BYTES: u64 = 8 << 20;
/// The ballast file's size.
pub const BALLAST_BYTES: u64 = 3 << 20;

/// Whether user and mount namespaces work here (`unshare -rm`).
pub fn available() -> bool {
    Command::new("unshare").args(["-rm", "true"]).status().is_ok_and(|status| status.success())
}

/// A small disk under `dir`: a server started from [`SmallDisk::server`] keeps its data on it.
#[derive(Debug)]
pub struct SmallDisk {
    mount: PathBuf,
    script: PathBuf,
    config: PathBuf,
}

impl SmallDisk {
    /// Prepares the mount point, the server's configuration (2 MiB log segments, the smallest
    /// that hold the largest record once values are at most 256 KiB; no checkpoint during a
    /// test) plus `extra_config`, and the script that mounts the tmpfs, writes the ballast and
    /// becomes the server.
    pub fn new(dir: &Path, extra_config: &str) -> SmallDisk {
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount).expect("mount point");
        let config = dir.join("small-log.toml");
        let default = Command::new(env!("CARGO_BIN_EXE_ferrite-server"))
            .arg("--print-default-config")
            .output()
            .expect("print the default config");
        let text = String::from_utf8(default.stdout)
            .expect("UTF-8")
            .replace("value_bytes_max = 2097152", "value_bytes_max = 262144")
            + "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_interval_secs = 3600\n"
            + extra_config;
        std::fs::write(&config, text).expect("write the config");
        let script = dir.join("on-small-disk.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nset -e\nmount -t tmpfs -o size={TMPFS_BYTES} tmpfs '{mnt}'\nhead -c {BALLAST_BYTES} \
                 /dev/zero > '{mnt}/ballast'\nexec '{server}' \"$@\"\n",
                mnt = mount.display(),
                server = env!("CARGO_BIN_EXE_ferrite-server"),
            ),
        )
        .expect("write the script");
        SmallDisk { mount, script, config }
    }

    /// The server, to be started.
    pub fn server(&self) -> ServerBuilder {
        TestServer::builder_for(which("unshare"))
            .args(&["-rm", "sh", &self.script.display().to_string(), "--config", &self.config.display().to_string()])
            .data_dir(&self.mount.join("data"))
    }

    /// Gives the ballast's room back, through the server's own view of its mount namespace.
    pub fn remove_ballast(&self, server: &TestServer) {
        let ballast = Path::new("/proc")
            .join(server.pid().to_string())
            .join("root")
            .join(self.mount.strip_prefix("/").expect("absolute"))
            .join("ballast");
        std::fs::remove_file(&ballast).unwrap_or_else(|e| panic!("remove {}: {e}", ballast.display()));
    }
}

/// Runs `write` until it succeeds, for a few seconds at most, while it fails for want of room:
/// right after the ballast goes, the log may be making its spare segment in the room that came
/// back, and a write that needs a segment of its own then finds none until the spare is in.
pub fn once_room_is_back<T>(mut write: impl FnMut() -> Result<T, ferrite_client::Error>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match write() {
            Ok(done) => return done,
            Err(error)
                if error.code() == Some(ferrite_proto::ErrorCode::NoSpace) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(error) => panic!("space is back, yet the write fails: {error}"),
        }
    }
}

fn which(program: &str) -> String {
    let output = Command::new("sh").args(["-c", &format!("command -v {program}")]).output().expect("sh");
    String::from_utf8(output.stdout).expect("UTF-8").trim().to_owned()
}
