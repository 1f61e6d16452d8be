//! Whether a users file is open to other accounts of its machine. Its password hashes are slow
//! to attack but not impossible, and whoever may write it may give any user every right, so only
//! its owner (the server's account) should have access. The server warns at every load and
//! `ferrite user` after every command; neither refuses, since the operator may have reasons
//! (an administrators' group) that a warning respects and a refusal would not.

use std::path::Path;

/// Who besides its owner may read or write the file at `path`, as a warning naming the file,
/// its mode and the fix; `None` if nobody may (or it cannot be examined: whoever reads it says
/// why).
pub fn exposure_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        let access = [("readable", 0o040, 0o004), ("writable", 0o020, 0o002)]
            .into_iter()
            .filter_map(|(what, group, others)| {
                let by = match (mode & group != 0, mode & others != 0) {
                    (true, true) => "its group and others",
                    (true, false) => "its group",
                    (false, true) => "others",
                    (false, false) => return None,
                };
                Some(format!("{what} by {by}"))
            })
            .collect::<Vec<_>>();
        if access.is_empty() {
            return None;
        }
        let shown = path.display();
        Some(format!(
            "users file {shown} is {} (mode {mode:03o}): whoever may read it can attack its password hashes \
             offline, whoever may write it can give any user every right; make it private with `chmod 600 {shown}`",
            access.join(" and ")
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn only_a_file_its_owner_alone_may_use_passes() {
        let path = std::env::temp_dir().join(format!("ferrite-auth-exposure-{}", std::process::id()));
        std::fs::write(&path, "").expect("write");
        let warning = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            exposure_warning(&path)
        };
        assert_eq!(warning(0o600), None);
        assert_eq!(warning(0o700), None, "execution gives nothing away");
        let group = warning(0o640).expect("a group may read");
        assert!(group.contains("is readable by its group (mode 640)") && group.contains("chmod 600"), "{group}");
        let both = warning(0o666).expect("everyone may read and write");
        assert!(both.contains("readable by its group and others and writable by its group and others"), "{both}");
        let others = warning(0o602).expect("others may write");
        assert!(others.contains("is writable by others (mode 602)"), "{others}");
        std::fs::remove_file(&path).expect("cleaned");
        assert_eq!(exposure_warning(&path), None, "a missing file is reported by whoever reads it");
    }
}
