//! `ferrite-server`: runs a Ferrite server from a config file or the embedded default.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use ferrite_auth::Rights;
use ferrite_server::config::{Config, Overrides, DEFAULT_CONFIG_TOML};
use ferrite_server::BoundServer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// The Ferrite server: memory-centric active key-value storage.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration file; without one the embedded default is used
    /// (see --print-default-config).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen on HOST:PORT; shard i listens on PORT+i. Port 0 gives every shard a free port.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,
    /// Number of shards (copies of the first configured shard on consecutive ports).
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// Directory for the server's files.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Also serve RESP (Redis protocol) on HOST:PORT; shard i on PORT+i. Port 0 gives every shard
    /// a free port.
    #[arg(long, value_name = "HOST:PORT")]
    resp_listen: Option<SocketAddr>,
    /// Make the Active Data Object plugin in library PATH known as NAME, for pools' plugin
    /// chains (repeatable; adds to or replaces the config's [plugins] table and the shipped
    /// plugins installed beside the server).
    #[arg(long = "plugin", value_name = "NAME=PATH", value_parser = parse_plugin)]
    plugins: Vec<(String, PathBuf)>,
    /// Speak TLS on every listener (native and RESP) with the certificate chain in this PEM file
    /// (needs --tls-key; replaces `[tls] cert_file`).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, in PEM (replaces `[tls] key_file`).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require clients to present a certificate signed by a CA in this PEM file: mutual TLS
    /// (replaces `[tls] client_ca_file`).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Require clients to authenticate as a user of this users file, and allow each only what
    /// its grants say (replaces `[auth] users_file`). Edit it with `ferrite user`; SIGHUP
    /// reloads it.
    #[arg(long = "users", value_name = "FILE")]
    users_file: Option<PathBuf>,
    /// Serve Prometheus metrics on HOST:PORT (`GET /metrics`); port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Run as node N of a cluster (see docs/cluster.md): every shard is a replica of its Raft
    /// group (replaces `[cluster] node_id`).
    #[arg(long, value_name = "N")]
    node_id: Option<u64>,
    /// In cluster mode, listen for the other nodes on HOST:PORT; group g on PORT+g (replaces
    /// `[cluster] peer_listen`; default: --listen's host, port 7300).
    #[arg(long, value_name = "HOST:PORT", requires = "node_id")]
    peer_listen: Option<SocketAddr>,
    /// In cluster mode, the host name or address other nodes and clients reach this node at
    /// (replaces `[cluster] advertise_host`; default: --listen's address).
    #[arg(long, value_name = "HOST", requires = "node_id")]
    advertise_host: Option<String>,
    /// In cluster mode, the file holding the cluster's secret, the same on every node: peers
    /// prove they hold it (replaces `[cluster] secret_file`).
    #[arg(long, value_name = "FILE", requires = "node_id")]
    cluster_secret: Option<PathBuf>,
    /// Log level (error, warn, info, debug, trace, off) or a tracing filter such as
    /// `warn,ferrite_server=debug` (each TARGET=LEVEL applies to the modules under TARGET).
    #[arg(long, default_value = "info", value_name = "LEVEL", value_parser = parse_log_level)]
    log_level: String,
    /// How log lines are written to standard error: `text` for people (coloured only on a
    /// terminal), `json` for log collectors (one JSON object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    log_format: LogFormat,
    /// Restore the backup in DIR (taken with `ferrite backup DIR`) into --data-dir, which must be
    /// new or empty, verify every shard as `ferrite check` does, and exit without serving. A
    /// restore that fails removes what it created.
    #[arg(long, value_name = "DIR", requires = "data_dir")]
    restore: Option<PathBuf>,
    /// With --restore: show the progress of the copy and of the verification on standard error
    /// even when it is not a terminal (on one it is shown anyway); only for backups of at least
    /// 64 MiB, or FERRITE_PROGRESS_BYTES bytes.
    #[arg(long, requires = "restore")]
    progress: bool,
    /// Print the embedded default configuration and exit.
    #[arg(long)]
    print_default_config: bool,
    /// Check the configuration FILE (with the other options applied) and the TLS and users files
    /// it names (loaded as at start), and print the effective configuration, every setting
    /// included, then exit: 0 if it is valid, 1 with the reason if not. Nothing is started and the
    /// data directory is not touched.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `NAME=PATH` of `--plugin`.
fn parse_plugin(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_string(), PathBuf::from(path))),
        _ => Err(format!("expected NAME=PATH, got {text:?}")),
    }
}

/// `--log-level`: a filter whose every directive names a level. The filter syntax takes a word
/// alone that is not a level (`bogus`, `verbose`) for a target to log at every level, and then
/// nothing else is logged: a mistyped level would silence the server, so it is refused instead.
fn parse_log_level(text: &str) -> Result<String, String> {
    const LEVELS: &str = "error, warn, info, debug, trace or off";
    for directive in text.split(',').map(str::trim).filter(|directive| !directive.is_empty()) {
        if !directive.contains('=') && directive.parse::<LevelFilter>().is_err() {
            return Err(format!("'{directive}' is neither a level ({LEVELS}) nor a TARGET=LEVEL directive"));
        }
    }
    EnvFilter::try_new(text).map_err(|error| format!("{error} (a level is one of {LEVELS})"))?;
    Ok(text.to_owned())
}

/// `level` with the Raft library's own messages at `warn` unless `level` names it: its `info`
/// lines describe its internals at every start and election, which Ferrite reports in its own
/// words.
fn quiet_dependencies(level: &str) -> String {
    if level.contains("openraft") {
        level.to_owned()
    } else {
        format!("{level},openraft=warn")
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_default_config {
        print!("{DEFAULT_CONFIG_TOML}");
        return ExitCode::SUCCESS;
    }
    let filter =
        EnvFilter::try_new(quiet_dependencies(&args.log_level)).expect("--log-level was checked when it was parsed");
    if let Some(path) = &args.check_config {
        let checked = effective_config(Some(path), &args).and_then(|config| {
            ferrite_server::check_files(&config).map(|()| config).map_err(|error| error.to_string())
        });
        return match checked {
            Ok(config) => {
                // A reader that stops early (`| head`) has all it wanted: not an error.
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "# {}: valid. The effective configuration:", path.display())
                    .and_then(|()| write!(out, "{}", config.to_toml()));
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
    if let Some(backup) = &args.restore {
        return restore(backup, &args);
    }
    raise_open_file_limit();
    return_large_buffers_to_the_system();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Makes glibc's allocator give large blocks (256 KiB and up) their own mappings, returned to the
/// system when freed. The log's batches, a growth's subtable image and a burst's buffers are
/// large and transient; by default glibc raises its mapping threshold after the first such block
/// is freed and serves the next ones from its heaps, which keep the memory resident for good
/// (about 6 bytes per key of a million-key pool, measured; 3 with this).
#[allow(unsafe_code)]
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const THRESHOLD_BYTES: libc::c_int = 256 * 1024;
        // SAFETY: mallopt only sets an allocator parameter; called before any other thread runs.
        let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD_BYTES) };
        if set != 1 {
            tracing::warn!("could not set the allocator's mapping threshold; large buffers may stay resident");
        }
    }
}

/// Raises the soft limit on open files to the hard limit: every durable pool holds its memory
/// file open, next to every client connection, and the common default soft limit (1024) is far
/// below what a shard's pool and connection limits allow.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, soft = ?limit.current, "cannot raise the open-file limit");
        }
    }
}

/// `--restore DIR`: restores a backup into `--data-dir` and reports each shard.
fn restore(backup: &std::path::Path, args: &Args) -> ExitCode {
    let outcome = args.data_dir.as_ref().ok_or_else(|| "--restore needs --data-dir".to_owned()).and_then(|data_dir| {
        ferrite_server::restore::restore(backup, data_dir, args.progress).map(|shards| (data_dir.clone(), shards))
    });
    match outcome {
        Ok((data_dir, shards)) => {
            for shard in &shards {
                println!(
                    "shard {}: restored {} files ({} bytes) up to LSN {}; {} pool(s), {} log records replayed",
                    shard.shard, shard.files, shard.bytes, shard.lsn, shard.pools, shard.records_replayed
                );
            }
            println!(
                "restored {} into {}; start a server on it with --data-dir {} --shards {}",
                backup.display(),
                data_dir.display(),
                data_dir.display(),
                shards.len()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration `path` (or the embedded default) gives, with the command line's overrides.
fn effective_config(path: Option<&PathBuf>, args: &Args) -> Result<Config, String> {
    match path {
        Some(path) => Config::load(path),
        None => Ok(Config::embedded_default()),
    }
    .and_then(|config| {
        config.apply(&Overrides {
            listen: args.listen,
            shards: args.shards,
            data_dir: args.data_dir.clone(),
            resp_listen: args.resp_listen,
            plugins: args.plugins.clone(),
            metrics_listen: args.metrics_listen,
            tls_cert: args.tls_cert.clone(),
            tls_key: args.tls_key.clone(),
            tls_client_ca: args.tls_client_ca.clone(),
            users_file: args.users_file.clone(),
            node_id: args.node_id,
            peer_listen: args.peer_listen,
            advertise_host: args.advertise_host.clone(),
            cluster_secret: args.cluster_secret.clone(),
        })
    })
    .map_err(|e| e.to_string())
}

fn run(args: Args) -> Result<(), String> {
    let config = effective_config(args.config.as_ref(), &args)?;
    let server = BoundServer::bind(config).map_err(|e| e.to_string())?;
    let announcement = announcement(&server);
    server.run(shutdown_signal(announcement)).map_err(|e| e.to_string())
}

/// What the server tells the person (or test) who started it: where it listens and how to talk
/// to it. Tests read the `shard N: native ADDRESS` and `shard N: resp ADDRESS` lines, so their
/// shape is stable.
fn announcement(server: &BoundServer) -> String {
    let config = server.config();
    let shard = &config.shards[0];
    let mut lines = vec![format!(
        "ferrite-server {} with {} shard(s), store {}, backing {} ({}), data dir {}",
        env!("CARGO_PKG_VERSION"),
        config.shards.len(),
        shard.store.kind().name(),
        shard.backing.name(),
        shard.backing.promise(),
        config.data_dir.display(),
    )];
    for (index, address) in server.addresses().iter().enumerate() {
        lines.push(format!("shard {index}: native {address}"));
        if let Some(resp) = server.resp_addresses().get(index) {
            lines.push(format!("shard {index}: resp {resp}"));
        }
    }
    if let Some(metrics) = server.metrics_address() {
        lines.push(format!("metrics: http://{metrics}/metrics"));
    }
    if let Some((node, cluster)) = server.cluster_node() {
        lines.push(format!("node {}: peer {}", node.node_id, node.peer));
        lines.push(match cluster {
            Some(cluster) => format!("cluster: member of {cluster}"),
            None => format!(
                "cluster: uninitialized (make the first members with: ferrite --addr {} cluster init --node {} ...)",
                node.native, node.native
            ),
        });
    }
    let client = ClientHint::for_server(server);
    lines.extend(client.notes.iter().cloned());
    let ferrite = &client.ferrite;
    let mut ready = format!(
        "ready. Try: {}{ferrite} pool create {DEMO_POOL} && {ferrite} put {DEMO_POOL} hello world",
        client.user.as_ref().map(|user| format!("export FERRITE_USER={user} && ")).unwrap_or_default()
    );
    if let Some(resp) = server.resp_addresses().first() {
        let user = client.user.as_ref().map(|user| format!(" --user {user} --askpass")).unwrap_or_default();
        ready.push_str(&format!(", or: redis-cli -h {} -p {}{}{user} ping", resp.ip(), resp.port(), client.redis_cli));
    }
    lines.push(ready);
    let plugins = server.plugin_names();
    if !plugins.is_empty() {
        lines.push(format!(
            "plugins: {} ({ferrite} pool create counters --plugins counter && {ferrite} invoke counters hits \"add 1\" \
             --create-size 8; docs/plugins.md)",
            plugins.join(", ")
        ));
    }
    lines.push("Stop with Ctrl-C (SIGINT) or SIGTERM.".to_string());
    lines.join("\n")
}

/// The pool the startup hint creates and writes.
const DEMO_POOL: &str = "demo";

/// How the commands the announcement suggests reach this server: with the TLS options and the
/// user it requires, so that they work as printed wherever the server can know the values, and
/// with a placeholder in capitals (explained in a note) where it cannot.
struct ClientHint {
    /// `ferrite` with the address and TLS options.
    ferrite: String,
    /// `redis-cli`'s TLS options.
    redis_cli: String,
    /// The user to authenticate as, on a server with users.
    user: Option<String>,
    /// Lines saying what the options and placeholders are.
    notes: Vec<String>,
}

impl ClientHint {
    fn for_server(server: &BoundServer) -> ClientHint {
        let config = server.config();
        let mut hint = ClientHint {
            ferrite: format!("ferrite --addr {}", server.addresses()[0]),
            redis_cli: String::new(),
            user: None,
            notes: Vec::new(),
        };
        if let Some(cert_file) = &config.tls.cert_file {
            hint.ferrite.push_str(" --ca CA_FILE");
            hint.redis_cli.push_str(" --tls --cacert CA_FILE");
            let mut note = format!("tls: clients need CA_FILE, the CA certificate that signed {}", cert_file.display());
            if let Some(client_ca_file) = &config.tls.client_ca_file {
                hint.ferrite.push_str(" --client-cert CLIENT_CERT --client-key CLIENT_KEY");
                hint.redis_cli.push_str(" --cert CLIENT_CERT --key CLIENT_KEY");
                note.push_str(&format!(", and a client certificate and key signed by {}", client_ca_file.display()));
            }
            hint.notes.push(format!("{note} (docs/security.md)"));
        }
        if let Some(users_file) = server.users_file() {
            let mut note = format!(
                "users: clients authenticate as a user of {}: ferrite takes the user from --user or FERRITE_USER and \
                 its password from FERRITE_PASSWORD, or asks for it at a terminal (docs/security.md)",
                users_file.display()
            );
            let user = server.password_user_with(DEMO_POOL, Rights::ADMIN.union(Rights::WRITE));
            if user.is_none() {
                note.push_str(&format!(
                    "; no user with a password may create and write pool '{DEMO_POOL}' yet: ferrite user grant NAME \
                     {DEMO_POOL} admin,write --file {}, then SIGHUP the server",
                    users_file.display()
                ));
            }
            hint.notes.push(note);
            hint.user = Some(user.unwrap_or_else(|| "NAME".to_owned()));
        }
        hint
    }
}

/// Installs the SIGINT and SIGTERM handlers, announces readiness (only now, so a signal sent by
/// whoever waits for the announcement is always handled), and completes on either signal.
async fn shutdown_signal(announcement: String) {
    use tokio::signal::unix::{signal, SignalKind};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    let mut out = std::io::stdout().lock();
    // If stdout is gone there is nobody to announce to; the server still runs.
    let _ = writeln!(out, "{announcement}").and_then(|()| out.flush());
    drop(out);
    notify_service_manager(sd_notify::NotifyState::Ready);
    match (terminate, interrupt) {
        (Ok(mut terminate), Ok(mut interrupt)) => {
            tokio::select! {
                _ = terminate.recv() => tracing::info!("SIGTERM received"),
                _ = interrupt.recv() => tracing::info!("SIGINT received"),
            }
        }
        (Err(error), _) | (_, Err(error)) => {
            tracing::error!(%error, "cannot install signal handlers; stop the server with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
    notify_service_manager(sd_notify::NotifyState::Stopping);
}

/// Tells systemd (a `Type=notify` unit, see `deploy/ferrite.service`) that the server is ready or
/// stopping. Does nothing when the server was not started by a service manager (`NOTIFY_SOCKET`
/// unset).
fn notify_service_manager(state: sd_notify::NotifyState<'_>) {
    if let Err(error) = sd_notify::notify(false, &[state]) {
        tracing::warn!(%error, "cannot notify the service manager");
    }
}
