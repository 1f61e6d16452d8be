//! `ferrite user` on a real users file: what it writes (checked by loading the file with
//! `ferrite-auth`, as the server does), what it prints, and what it refuses. No server is needed:
//! the command edits the file alone.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use ferrite_auth::secret::{certificate_fingerprint, verify_secret};
use ferrite_auth::{PoolPattern, Quota, Rights, UsersFile};
use serde_json::Value;

/// What every edit reminds the operator of.
const REMINDER: &str = "the server applies it on SIGHUP (or restart)";

/// A directory of its own for one test, removed when the test ends (even by panicking).
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(label: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ferrite-cli-users-{}-{label}", std::process::id()));
        // Left over only if an earlier run with this process id was killed.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Scratch { dir }
    }

    fn users_file(&self) -> PathBuf {
        self.dir.join("users.toml")
    }

    /// Runs `ferrite ARGS --file <users file>` with `stdin` piped in (so never a terminal).
    fn ferrite(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(args)
            .arg("--file")
            .arg(self.users_file())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the ferrite binary");
        let mut input = child.stdin.take().expect("stdin is piped");
        // A command that reads no secret may exit before taking its input; that is no failure.
        let _ = input.write_all(stdin);
        drop(input);
        // The outputs are a few lines: they fit in the pipes, so waiting first cannot deadlock.
        let status = child.wait().expect("wait for ferrite");
        let mut stdout = Vec::new();
        child.stdout.take().expect("stdout is piped").read_to_end(&mut stdout).expect("read stdout");
        let mut stderr = Vec::new();
        child.stderr.take().expect("stderr is piped").read_to_end(&mut stderr).expect("read stderr");
        Output { status, stdout, stderr }
    }

    fn load(&self) -> UsersFile {
        UsersFile::load(&self.users_file()).expect("the users file loads")
    }

    fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(self.users_file()).expect("read the users file")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts success with nothing on stderr, and returns stdout.
fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "ferrite failed ({}): {}{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    assert!(output.stderr.is_empty(), "unexpected stderr: {}", text(&output.stderr));
    text(&output.stdout)
}

/// Asserts the exit status `code` with nothing on stdout, and returns stderr.
fn fails(output: &Output, code: i32) -> String {
    assert_eq!(output.status.code(), Some(code), "stdout: {}\nstderr: {}", text(&output.stdout), text(&output.stderr));
    assert!(output.stdout.is_empty(), "unexpected stdout: {}", text(&output.stdout));
    text(&output.stderr)
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&ok(output)).expect("the output is one JSON document")
}

fn pattern(text: &str) -> PoolPattern {
    PoolPattern::new(text).expect("a valid pattern")
}

/// Adds a user with password `secret` on stdin.
fn add(scratch: &Scratch, name: &str, secret: &str) {
    let out = ok(&scratch.ferrite(&["user", "add", name], format!("{secret}\n").as_bytes()));
    assert!(out.contains(&format!("added user '{name}'")) && out.contains(REMINDER), "{out}");
}

/// Proves that a secret piped in is stored only as a hash, which `list` never shows, in either
/// rendering.
#[test]
fn add_with_the_secret_on_stdin_then_list_shows_the_user_and_no_hash() {
    let scratch = Scratch::new("add-list");
    add(&scratch, "alice", "correct horse");
    let hash = scratch.load().user("alice").and_then(|user| user.password.clone()).expect("alice has a password");

    let listed = ok(&scratch.ferrite(&["user", "list"], b""));
    assert!(listed.contains("alice") && listed.contains("password"), "{listed}");
    assert!(!listed.contains(&hash) && !listed.contains("argon2"), "a hash was printed: {listed}");

    let output = scratch.ferrite(&["--json", "user", "list"], b"");
    assert!(!text(&output.stdout).contains("argon2"), "a hash was printed: {}", text(&output.stdout));
    let listed = json(&output);
    let alice = &listed["users"]["alice"];
    assert_eq!(alice["password"], Value::Bool(true));
    assert_eq!(alice["certificate_sha256"], Value::Null);
    assert_eq!(alice["grants"], serde_json::json!([]));
    assert_eq!(alice["quota"], serde_json::json!({ "connections": null, "pools": null, "pool_bytes": null }));
}

/// Proves the file holds a hash of exactly the line given (its `\r\n` stripped) and only its
/// owner may read it.
#[test]
fn the_stored_hash_verifies_the_secret_alone_and_the_file_is_private() {
    let scratch = Scratch::new("hash");
    ok(&scratch.ferrite(&["user", "add", "alice"], b"correct horse\r\n"));
    let hash = scratch.load().user("alice").and_then(|user| user.password.clone()).expect("alice has a password");
    assert!(verify_secret(&hash, b"correct horse"));
    assert!(!verify_secret(&hash, b"correct horse\r"), "the line ending is not part of the secret");
    assert!(!verify_secret(&hash, b"correct horsE"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(scratch.users_file()).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "a users file is readable by its owner alone");
    }
}

/// Proves `passwd` replaces the hash: the old secret stops working, the new one works.
#[test]
fn passwd_replaces_the_password() {
    let scratch = Scratch::new("passwd");
    add(&scratch, "alice", "correct horse");
    let out = ok(&scratch.ferrite(&["user", "passwd", "alice"], b"battery staple\n"));
    assert!(out.contains("replaced the password of user 'alice'") && out.contains(REMINDER), "{out}");
    let hash = scratch.load().user("alice").and_then(|user| user.password.clone()).expect("alice has a password");
    assert!(verify_secret(&hash, b"battery staple"));
    assert!(!verify_secret(&hash, b"correct horse"));

    let error = fails(&scratch.ferrite(&["user", "passwd", "bob"], b"battery staple\n"), 1);
    assert!(error.starts_with("error: no user named 'bob'"), "{error}");
}

/// Proves a secret shorter than the minimum is refused, by `add` and `passwd`, with the file
/// left byte for byte as it was.
#[test]
fn a_short_secret_is_refused_and_the_file_is_unchanged() {
    let scratch = Scratch::new("short");
    add(&scratch, "alice", "correct horse");
    let before = scratch.file_bytes();
    for args in [&["user", "add", "bob"][..], &["user", "passwd", "alice"]] {
        let error = fails(&scratch.ferrite(args, b"short\n"), 1);
        assert!(error.starts_with("error: the secret is 5 bytes long; it must be at least 8"), "{error}");
        assert_eq!(scratch.file_bytes(), before, "{args:?} changed the file");
    }
    let error = fails(&scratch.ferrite(&["user", "add", "bob"], b""), 1);
    assert!(error.contains("no secret on standard input"), "{error}");
    assert_eq!(scratch.file_bytes(), before);
}

/// Proves grants add up per pattern and revokes take back exactly what they name, as the server
/// would read the file.
#[test]
fn grant_then_revoke_changes_rights_as_expected() {
    let scratch = Scratch::new("grants");
    add(&scratch, "alice", "correct horse");
    let out = ok(&scratch.ferrite(&["user", "grant", "alice", "orders*", "read,write"], b""));
    assert!(out.contains("granted read,write on 'orders*' to user 'alice'") && out.contains(REMINDER), "{out}");
    ok(&scratch.ferrite(&["user", "grant", "alice", "*", "invoke"], b""));
    let alice = scratch.load().user("alice").cloned().expect("alice");
    assert_eq!(alice.rights_on("orders-2026"), Rights::parse_list("read,write,invoke").expect("rights"));
    assert_eq!(alice.rights_on("billing"), Rights::INVOKE);

    let granted = json(&scratch.ferrite(&["--json", "user", "revoke", "alice", "orders*", "write"], b""));
    assert_eq!(granted["rights"], serde_json::json!(["read"]), "{granted}");
    let alice = scratch.load().user("alice").cloned().expect("alice");
    assert_eq!(alice.rights_on("orders-2026"), Rights::READ.union(Rights::INVOKE));

    let out = ok(&scratch.ferrite(&["user", "revoke", "alice", "orders*", "all"], b""));
    assert!(out.contains("the grant is gone"), "{out}");
    let alice = scratch.load().user("alice").cloned().expect("alice");
    assert_eq!(alice.grants.len(), 1, "only the grant on '*' is left");
    assert_eq!(alice.grants[0].pools, pattern("*"));

    let error = fails(&scratch.ferrite(&["user", "revoke", "alice", "orders", "read"], b""), 1);
    assert!(error.contains("user 'alice' has no grant on 'orders'"), "{error}");
    let error = fails(&scratch.ferrite(&["user", "grant", "alice", "orders", "read,delete"], b""), 2);
    assert!(error.contains("unknown right 'delete'"), "{error}");
}

/// Proves adding a name that exists fails before asking for a secret, and writes nothing.
#[test]
fn adding_an_existing_user_fails_and_changes_nothing() {
    let scratch = Scratch::new("exists");
    add(&scratch, "alice", "correct horse");
    let before = scratch.file_bytes();
    let error = fails(&scratch.ferrite(&["user", "add", "alice"], b"battery staple\n"), 1);
    assert!(error.starts_with("error: user 'alice' exists already"), "{error}");
    assert_eq!(scratch.file_bytes(), before);
}

/// Proves deleting names the user that is missing, and a deleted user is gone from the file.
#[test]
fn deleting_a_missing_user_fails_clearly() {
    let scratch = Scratch::new("del");
    add(&scratch, "alice", "correct horse");
    let before = scratch.file_bytes();
    let error = fails(&scratch.ferrite(&["user", "del", "bob"], b""), 1);
    assert_eq!(error.trim_end(), "error: no user named 'bob'");
    assert_eq!(scratch.file_bytes(), before);

    let out = ok(&scratch.ferrite(&["user", "del", "alice"], b""));
    assert!(out.contains("deleted user 'alice'") && out.contains(REMINDER), "{out}");
    assert!(scratch.load().users.is_empty());
    assert!(ok(&scratch.ferrite(&["user", "list"], b"")).starts_with("no users"));
}

/// Every `ferrite user` command warns when it leaves the users file readable or writable by
/// its group or others, and says how to make it private; an edit saves the file private again.
#[test]
fn a_users_file_others_may_read_or_write_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("exposed");
    add(&scratch, "alice", "correct horse");
    let chmod = |mode| std::fs::set_permissions(scratch.users_file(), std::fs::Permissions::from_mode(mode));
    chmod(0o640).expect("chmod");
    let output = scratch.ferrite(&["user", "list"], b"");
    assert!(output.status.success() && text(&output.stdout).contains("alice"), "{output:?}");
    let warning = text(&output.stderr);
    assert!(warning.starts_with("warning: ") && warning.contains("readable by its group"), "{warning}");
    assert!(warning.contains(&format!("chmod 600 {}", scratch.users_file().display())), "{warning}");
    chmod(0o602).expect("chmod");
    let warning = text(&scratch.ferrite(&["user", "list"], b"").stderr);
    assert!(warning.contains("writable by others"), "{warning}");
    ok(&scratch.ferrite(&["user", "grant", "alice", "orders", "read"], b""));
    assert_eq!(std::fs::metadata(scratch.users_file()).expect("metadata").permissions().mode() & 0o777, 0o600);
}

/// Proves `--certificate` stores the SHA-256 of the certificate's DER, the fingerprint the
/// server computes from a TLS handshake, and that such a user needs no password.
#[test]
fn a_certificate_user_is_known_by_the_sha256_of_its_der() {
    let scratch = Scratch::new("certificate");
    let certified = rcgen::generate_simple_self_signed(vec!["backup-agent".to_owned()]).expect("a certificate");
    let pem = scratch.dir.join("agent.pem");
    std::fs::write(&pem, certified.cert.pem()).expect("write the certificate");
    let expected = certificate_fingerprint(certified.cert.der());

    let pem_arg = pem.to_str().expect("a UTF-8 path");
    let added = json(
        &scratch.ferrite(&["--json", "user", "add", "backup-agent", "--certificate", pem_arg, "--no-password"], b""),
    );
    assert_eq!(added["certificate_sha256"], Value::from(expected.clone()), "{added}");
    assert_eq!(added["password"], Value::Bool(false));
    let agent = scratch.load().user("backup-agent").cloned().expect("the agent");
    assert_eq!(agent.certificate_sha256.as_deref(), Some(expected.as_str()));
    assert_eq!(agent.password, None);
    assert!(ok(&scratch.ferrite(&["user", "list"], b"")).contains(&expected));

    let not_pem = scratch.dir.join("not.pem");
    std::fs::write(&not_pem, "no certificate here\n").expect("write");
    let args = ["user", "add", "other", "--certificate", not_pem.to_str().expect("UTF-8"), "--no-password"];
    let error = fails(&scratch.ferrite(&args, b""), 1);
    assert!(error.contains("holds no PEM CERTIFICATE"), "{error}");
}

/// Proves a quota is stored and listed, and that giving no limits makes the user unlimited again.
#[test]
fn quota_is_set_and_shown() {
    let scratch = Scratch::new("quota");
    add(&scratch, "alice", "correct horse");
    let out = ok(&scratch.ferrite(&["user", "quota", "alice", "--connections", "16", "--pool-bytes", "1GiB"], b""));
    assert!(out.contains("connections 16, pools unlimited, pool bytes 1 GiB") && out.contains(REMINDER), "{out}");
    let quota = scratch.load().user("alice").map(|user| user.quota.clone()).expect("alice");
    assert_eq!(quota, Quota { connections: Some(16), pools: None, pool_bytes: Some(1 << 30) });

    assert!(ok(&scratch.ferrite(&["user", "list"], b"")).contains("connections 16, pools unlimited, pool bytes 1 GiB"));
    let listed = json(&scratch.ferrite(&["--json", "user", "list"], b""));
    assert_eq!(
        listed["users"]["alice"]["quota"],
        serde_json::json!({ "connections": 16, "pools": null, "pool_bytes": 1_073_741_824 })
    );

    ok(&scratch.ferrite(&["user", "quota", "alice"], b""));
    assert_eq!(scratch.load().user("alice").map(|user| user.quota.clone()), Some(Quota::default()));
}

/// Proves a user without a password needs a certificate: a usage error, with no file created.
#[test]
fn no_password_without_a_certificate_is_refused() {
    let scratch = Scratch::new("no-password");
    let error = fails(&scratch.ferrite(&["user", "add", "alice", "--no-password"], b""), 2);
    assert!(error.contains("--certificate"), "{error}");
    assert!(!scratch.users_file().exists());
}

/// Proves a name the file could not hold is refused before a secret is read or a file made.
#[test]
fn a_bad_user_name_is_refused() {
    let scratch = Scratch::new("bad-name");
    let error = fails(&scratch.ferrite(&["user", "add", "al ice"], b"correct horse\n"), 1);
    assert!(error.contains("user name 'al ice'"), "{error}");
    assert!(!scratch.users_file().exists());
}

/// Proves the edits need an existing, valid file (only `add` creates one), so a typing error in
/// `--file` is reported rather than starting an empty file.
#[test]
fn edits_other_than_add_need_the_file_to_exist() {
    let scratch = Scratch::new("missing");
    let error = fails(&scratch.ferrite(&["user", "grant", "alice", "*", "read"], b""), 1);
    assert!(error.contains("cannot read the users file"), "{error}");
    assert!(!scratch.users_file().exists());
    std::fs::write(scratch.users_file(), "[users.alice]\npassword = \"plain\"\n").expect("write");
    let error = fails(&scratch.ferrite(&["user", "list"], b""), 1);
    assert!(error.contains("not a PHC"), "{error}");
}

/// Proves an edit never writes through what lies at a temporary name beside the file: a world-
/// readable file left at the name earlier versions used, then a symbolic link planted there,
/// each followed by an edit, leave the users file a regular file readable by its owner alone,
/// holding the edit, and the link's target as it was.
#[cfg(unix)]
#[test]
fn an_edit_never_writes_through_a_leftover_file_or_a_link_beside_the_users_file() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("temporary");
    add(&scratch, "alice", "correct horse");
    let private_regular_file = |scratch: &Scratch| {
        let metadata = std::fs::symlink_metadata(scratch.users_file()).expect("the users file exists");
        assert!(metadata.file_type().is_file(), "the users file is a regular file: {metadata:?}");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600, "readable by its owner alone");
    };
    let temporary = scratch.dir.join(".users.toml.tmp");
    std::fs::write(&temporary, "left over by an interrupted edit\n").expect("a leftover file");
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o644)).expect("world-readable");
    ok(&scratch.ferrite(&["user", "grant", "alice", "orders*", "read"], b""));
    private_regular_file(&scratch);
    assert_eq!(scratch.load().user("alice").expect("alice").rights_on("orders-1"), Rights::READ);

    std::fs::remove_file(&temporary).expect("remove the leftover");
    let victim = scratch.dir.join("another-users-file.toml");
    let kept = "# another server's users, not to be touched\n";
    std::fs::write(&victim, kept).expect("the link's target");
    std::os::unix::fs::symlink(&victim, &temporary).expect("plant a link at the temporary name");
    ok(&scratch.ferrite(&["user", "grant", "alice", "orders*", "write"], b""));
    private_regular_file(&scratch);
    assert_eq!(scratch.load().user("alice").expect("alice").rights_on("orders-1"), Rights::READ.union(Rights::WRITE));
    assert_eq!(std::fs::read_to_string(&victim).expect("the target is still there"), kept, "the target is untouched");
}
