//! `ferrite user`: editing a server's users file offline, through `ferrite-auth`, the crate the
//! server reads it with, so the two can never disagree on its format. Every edit loads and
//! validates the whole file, changes it, and saves it atomically (owner-readable only); nothing
//! talks to a server, which applies the new file on SIGHUP.

use std::io::{BufRead, IsTerminal, Read};
use std::path::Path;

use ferrite_auth::secret::{certificate_fingerprint, hash_secret, SECRET_BYTES_MIN};
use ferrite_auth::users::check_user_name;
use ferrite_auth::{Quota, Rights, User, UsersFile};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::json;

use crate::args::{GrantArgs, UserCommand};
use crate::output::{fields, format_bytes, Report};

/// The reminder after every edit: the file is only the server's input, read at start and on
/// SIGHUP.
const APPLY_REMINDER: &str = "the server applies it on SIGHUP (or restart)";

/// The longest line read from standard input as a secret. Far beyond any real secret; it only
/// stops a mistaken pipe (`ferrite user add alice < big.log`) from being read whole and hashed.
const SECRET_LINE_BYTES_MAX: usize = 1024;
const _: () = assert!(SECRET_BYTES_MIN <= SECRET_LINE_BYTES_MAX);

/// Carries out a `ferrite user` command; a failure is the message to print after `error: `.
/// Warns (on standard error) if the command leaves the users file open to other accounts.
pub fn run(command: &UserCommand) -> Result<Report, String> {
    let outcome = carry_out(command);
    if let Some(warning) = ferrite_auth::exposure_warning(&command.file().path) {
        eprintln!("warning: {warning}");
    }
    outcome
}

fn carry_out(command: &UserCommand) -> Result<Report, String> {
    match command {
        UserCommand::Add { name, file, certificate, no_password } => {
            add(name, &file.path, certificate.as_deref(), !no_password)
        }
        UserCommand::Passwd { name, file } => set_password(name, &file.path),
        UserCommand::Del { name, file } => {
            let mut users = load(&file.path)?;
            users.remove(name).map_err(|error| error.to_string())?;
            save(&users, &file.path)?;
            Ok(edited(&file.path, name, format!("deleted user '{name}'"), json!({ "deleted": true })))
        }
        UserCommand::Grant(GrantArgs { name, pools, rights, file }) => {
            let mut users = load(&file.path)?;
            users.grant(name, pools.clone(), *rights).map_err(|error| error.to_string())?;
            save(&users, &file.path)?;
            let now = rights_on_pattern(&users, name, pools.as_str());
            Ok(edited(
                &file.path,
                name,
                format!("granted {rights} on '{pools}' to user '{name}' (now {now} there)"),
                json!({ "pools": pools, "granted": rights, "rights": now }),
            ))
        }
        UserCommand::Revoke(GrantArgs { name, pools, rights, file }) => {
            let mut users = load(&file.path)?;
            users.revoke(name, pools, *rights).map_err(|error| error.to_string())?;
            save(&users, &file.path)?;
            let now = rights_on_pattern(&users, name, pools.as_str());
            let left =
                if now.is_empty() { "no rights left: the grant is gone".to_owned() } else { format!("now {now}") };
            Ok(edited(
                &file.path,
                name,
                format!("revoked {rights} on '{pools}' from user '{name}' ({left})"),
                json!({ "pools": pools, "revoked": rights, "rights": now }),
            ))
        }
        UserCommand::Quota { name, file, connections, pools, pool_bytes } => {
            let mut users = load(&file.path)?;
            let quota = Quota { connections: *connections, pools: *pools, pool_bytes: *pool_bytes };
            users.set_quota(name, quota.clone()).map_err(|error| error.to_string())?;
            save(&users, &file.path)?;
            Ok(edited(
                &file.path,
                name,
                format!("set the quota of user '{name}': {}", quota_text(&quota)),
                json!({ "quota": quota_json(&quota) }),
            ))
        }
        UserCommand::List { file } => list(&file.path),
    }
}

fn add(name: &str, path: &Path, certificate: Option<&Path>, with_password: bool) -> Result<Report, String> {
    let mut users = UsersFile::load_or_empty(path).map_err(|error| error.to_string())?;
    // Refused before the secret is asked for, so nobody types one twice for nothing.
    check_user_name(name)?;
    if users.user(name).is_some() {
        return Err(format!(
            "user '{name}' exists already in {} (delete it first, or use 'ferrite user passwd')",
            path.display()
        ));
    }
    let fingerprint = certificate.map(read_certificate).transpose()?;
    let password = if with_password { Some(hash_secret(&read_secret(name)?)?) } else { None };
    let has_password = password.is_some();
    users.add(name, password, fingerprint.clone()).map_err(|error| error.to_string())?;
    save(&users, path)?;
    let proof = match (&fingerprint, has_password) {
        (Some(fingerprint), true) => format!("password and certificate sha256 {fingerprint}"),
        (Some(fingerprint), false) => format!("certificate sha256 {fingerprint}"),
        (None, _) => "password".to_owned(),
    };
    Ok(edited(
        path,
        name,
        format!("added user '{name}' ({proof})"),
        json!({ "added": true, "password": has_password, "certificate_sha256": fingerprint }),
    ))
}

fn set_password(name: &str, path: &Path) -> Result<Report, String> {
    let mut users = load(path)?;
    // Checked before the secret is asked for, as in `add`.
    if users.user(name).is_none() {
        return Err(no_such_user(name, path));
    }
    let password = hash_secret(&read_secret(name)?)?;
    users.set_password(name, password).map_err(|error| error.to_string())?;
    save(&users, path)?;
    Ok(edited(path, name, format!("replaced the password of user '{name}'"), json!({ "password_set": true })))
}

fn list(path: &Path) -> Result<Report, String> {
    let users = load(path)?;
    let mut text = String::new();
    for (name, user) in &users.users {
        let grants = if user.grants.is_empty() {
            "none".to_owned()
        } else {
            user.grants.iter().map(|grant| format!("{}: {}", grant.pools, grant.rights)).collect::<Vec<_>>().join("; ")
        };
        text.push_str(name);
        text.push('\n');
        let properties =
            fields(&[("proves itself by", proof_text(user)), ("grants", grants), ("quota", quota_text(&user.quota))]);
        for line in properties.lines() {
            text.push_str("  ");
            text.push_str(line);
            text.push('\n');
        }
    }
    if users.users.is_empty() {
        text = format!("no users in {}", path.display());
    }
    // Built field by field rather than serialising `User`, so a password hash can never reach
    // the output, whatever fields `User` gains.
    let json_users: serde_json::Map<String, serde_json::Value> = users
        .users
        .iter()
        .map(|(name, user)| {
            let grants: Vec<_> =
                user.grants.iter().map(|grant| json!({ "pools": grant.pools, "rights": grant.rights })).collect();
            let entry = json!({
                "password": user.password.is_some(),
                "certificate_sha256": user.certificate_sha256,
                "grants": grants,
                "quota": quota_json(&user.quota),
            });
            (name.clone(), entry)
        })
        .collect();
    Ok(Report::text(text, json!({ "file": path.display().to_string(), "users": json_users })))
}

/// An edit's report: what changed in which file, then the reminder that the server has not seen
/// it yet. `details` (a JSON object) gains the file's path and the user's name.
fn edited(path: &Path, name: &str, change: String, mut details: serde_json::Value) -> Report {
    let shown = path.display().to_string();
    if let Some(object) = details.as_object_mut() {
        object.insert("file".to_owned(), json!(shown));
        object.insert("user".to_owned(), json!(name));
    }
    Report::text(format!("{change} in {shown}\n{APPLY_REMINDER}"), details)
}

fn load(path: &Path) -> Result<UsersFile, String> {
    UsersFile::load(path).map_err(|error| error.to_string())
}

fn save(users: &UsersFile, path: &Path) -> Result<(), String> {
    users.save(path).map_err(|error| error.to_string())
}

fn no_such_user(name: &str, path: &Path) -> String {
    format!("no user named '{name}' in {}", path.display())
}

/// The rights `name` now holds through its grant on exactly `pattern` (none if it has none).
fn rights_on_pattern(users: &UsersFile, name: &str, pattern: &str) -> Rights {
    users
        .user(name)
        .and_then(|user| user.grants.iter().find(|grant| grant.pools.as_str() == pattern))
        .map_or(Rights::NONE, |grant| grant.rights)
}

/// The fingerprint of the first certificate in the PEM file at `path`.
fn read_certificate(path: &Path) -> Result<String, String> {
    let certificate = CertificateDer::from_pem_file(path).map_err(|error| match error {
        rustls_pki_types::pem::Error::NoItemsFound => format!("{} holds no PEM CERTIFICATE", path.display()),
        other => format!("cannot read the certificate {}: {other}", path.display()),
    })?;
    Ok(certificate_fingerprint(&certificate))
}

/// The secret for user `name`: typed twice at a terminal without echo, or else one line of
/// standard input (for scripts), without its line ending. Refuses one shorter than
/// `SECRET_BYTES_MIN`.
fn read_secret(name: &str) -> Result<Vec<u8>, String> {
    let stdin = std::io::stdin();
    let secret = if stdin.is_terminal() {
        let prompt_failed = |error: std::io::Error| format!("cannot read the secret from the terminal: {error}");
        let first = rpassword::prompt_password(format!("secret for user '{name}': ")).map_err(prompt_failed)?;
        let second = rpassword::prompt_password("the same secret again: ").map_err(prompt_failed)?;
        if first != second {
            return Err("the two secrets differ; nothing was changed".to_owned());
        }
        first.into_bytes()
    } else {
        read_secret_line(&mut stdin.lock())?
    };
    if secret.len() < SECRET_BYTES_MIN {
        return Err(format!(
            "the secret is {} bytes long; it must be at least {SECRET_BYTES_MIN}; nothing was changed",
            secret.len()
        ));
    }
    Ok(secret)
}

/// One line of `input`, without its `\n` or `\r\n`.
fn read_secret_line(input: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    input
        .take(SECRET_LINE_BYTES_MAX as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|error| format!("cannot read the secret from standard input: {error}"))?;
    if line.is_empty() {
        return Err(
            "no secret on standard input: run at a terminal to be asked for it, or pipe it as one line".to_owned()
        );
    }
    if line.pop_if(|byte| *byte == b'\n').is_some() {
        line.pop_if(|byte| *byte == b'\r');
    }
    if line.len() > SECRET_LINE_BYTES_MAX {
        return Err(format!(
            "the first line of standard input is longer than {SECRET_LINE_BYTES_MAX} bytes: not a secret"
        ));
    }
    Ok(line)
}

fn proof_text(user: &User) -> String {
    match (&user.password, &user.certificate_sha256) {
        (Some(_), Some(fingerprint)) => format!("password or certificate sha256 {fingerprint}"),
        (None, Some(fingerprint)) => format!("certificate sha256 {fingerprint}"),
        (Some(_), None) => "password".to_owned(),
        // `UsersFile::load` refuses a user with neither.
        (None, None) => "nothing".to_owned(),
    }
}

fn quota_text(quota: &Quota) -> String {
    if *quota == Quota::default() {
        return "unlimited".to_owned();
    }
    let limit = |value: Option<u64>, show: fn(u64) -> String| value.map_or("unlimited".to_owned(), show);
    format!(
        "connections {}, pools {}, pool bytes {}",
        limit(quota.connections, |n| n.to_string()),
        limit(quota.pools, |n| n.to_string()),
        limit(quota.pool_bytes, format_bytes)
    )
}

/// A quota with every limit present, `null` for none, so programs need not know the defaults.
fn quota_json(quota: &Quota) -> serde_json::Value {
    json!({ "connections": quota.connections, "pools": quota.pools, "pool_bytes": quota.pool_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_line_loses_its_line_ending_and_nothing_else() {
        let read = |bytes: &[u8]| read_secret_line(&mut &bytes[..]);
        assert_eq!(read(b"correct horse\n"), Ok(b"correct horse".to_vec()));
        assert_eq!(read(b"correct horse\r\n"), Ok(b"correct horse".to_vec()));
        assert_eq!(read(b"correct horse"), Ok(b"correct horse".to_vec()));
        assert_eq!(read(b" spaced \nsecond line\n"), Ok(b" spaced ".to_vec()));
        assert_eq!(read(b"ends in\r"), Ok(b"ends in\r".to_vec()), "a lone \\r is part of the secret");
        assert!(read(b"").is_err_and(|error| error.contains("no secret")));
        assert_eq!(read(b"\n"), Ok(Vec::new()), "an empty line is a (too short) secret, refused later");
    }

    #[test]
    fn a_line_longer_than_any_secret_is_refused() {
        let long = vec![b'x'; SECRET_LINE_BYTES_MAX + 1];
        assert!(read_secret_line(&mut &long[..]).is_err_and(|error| error.contains("longer than")));
        let mut longest = vec![b'x'; SECRET_LINE_BYTES_MAX];
        longest.push(b'\n');
        assert_eq!(read_secret_line(&mut &longest[..]).map(|line| line.len()), Ok(SECRET_LINE_BYTES_MAX));
    }

    #[test]
    fn quotas_show_each_limit_or_unlimited() {
        assert_eq!(quota_text(&Quota::default()), "unlimited");
        let quota = Quota { connections: Some(16), pools: None, pool_bytes: Some(1 << 30) };
        assert_eq!(quota_text(&quota), "connections 16, pools unlimited, pool bytes 1 GiB");
        assert_eq!(quota_json(&quota), json!({ "connections": 16, "pools": null, "pool_bytes": 1_073_741_824 }));
    }
}
