//! The command line: what `ferrite` accepts, and parsing of its values.

use clap::{Args, CommandFactory, Parser, Subcommand};
use ferrite_auth::{PoolPattern, Rights};

/// Command-line client for a Ferrite server.
#[derive(Debug, Parser)]
#[command(name = "ferrite", version, about, propagate_version = true)]
pub struct Cli {
    /// Address of any shard of the server; the others are learned from it.
    #[arg(long, global = true, env = "FERRITE_ADDR", default_value = "127.0.0.1:11911", value_name = "HOST:PORT")]
    pub addr: String,

    /// Print one JSON document instead of human-readable text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Speak TLS to the server (servers configured with `[tls]` require it); needs --ca.
    #[arg(long, global = true, requires = "ca")]
    pub tls: bool,

    /// PEM file with the CA certificate the server's certificate must chain to (implies --tls).
    #[arg(long, global = true, env = "FERRITE_CA", value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,

    /// PEM file with this client's certificate, for a server that requires client certificates
    /// (mutual TLS); needs --client-key.
    #[arg(long, global = true, env = "FERRITE_CLIENT_CERT", value_name = "FILE", requires_all = ["ca", "client_key"])]
    pub client_cert: Option<std::path::PathBuf>,

    /// The private key of --client-cert, in PEM.
    #[arg(long, global = true, env = "FERRITE_CLIENT_KEY", value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,

    /// Authenticate as this user, on a server with users (`ferrite-server --users`). The
    /// password comes from FERRITE_PASSWORD or, on a terminal, a prompt; never from the command
    /// line. Over mutual TLS a client certificate the users file names needs no user.
    #[arg(long, global = true, env = "FERRITE_USER", value_name = "NAME")]
    pub user: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// Where `--user`'s password comes from when no terminal can be asked.
pub const PASSWORD_ENV: &str = "FERRITE_PASSWORD";

impl Cli {
    /// The command line, parsed and checked: a usage error (what clap refuses, and the
    /// contradictions [`Cli::contradiction`] finds) is printed with the usage and exits with
    /// status 2, before anything connects.
    pub fn parse_checked() -> Cli {
        let mut cli = Cli::parse();
        if let Command::Invoke { mode: mode @ InvokeMode { deprecated_async: true, .. }, .. } = &mut cli.command {
            eprintln!("warning: --async is deprecated: use --fire-and-forget (async names a durability)");
            mode.fire_and_forget = true;
        }
        if let Some((path, message)) = cli.contradiction() {
            let mut command = Cli::command();
            // Gives each subcommand its full name (`ferrite invoke`) for its usage line.
            command.build();
            let subcommand = path.iter().fold(&mut command, |command, name| {
                command.find_subcommand_mut(name).expect("contradiction names a subcommand")
            });
            subcommand.error(clap::error::ErrorKind::ArgumentConflict, message).exit();
        }
        cli
    }

    /// A contradiction between arguments that clap's declarations cannot express, because it
    /// depends on a value or on a global option, with the subcommand it is in: `invoke` with an
    /// empty KEY (the pool itself, which has no value) and `--put` or `--create-size`;
    /// `cluster local` with `--json` (it prints lines as its nodes come and go).
    fn contradiction(&self) -> Option<(&'static [&'static str], String)> {
        if let Command::Cluster(ClusterCommand::Local(_)) = &self.command {
            return self.json.then(|| {
                (&["cluster", "local"][..], "--json is not offered: cluster local prints a line per event".to_owned())
            });
        }
        let Command::Invoke { key, mode, .. } = &self.command else { return None };
        let flag = match mode {
            _ if !key.is_empty() => return None,
            InvokeMode { put: Some(_), .. } => "--put",
            InvokeMode { create_size: Some(_), .. } => "--create-size",
            _ => return None,
        };
        Some((&["invoke"], format!("{flag} needs a KEY: an empty KEY invokes the pool itself, which has no value")))
    }

    /// The credentials `--user` asks for: the password from `FERRITE_PASSWORD`, or asked for on
    /// the terminal; `None` without `--user`.
    pub fn credentials(&self) -> Result<Option<ferrite_client::UserCredentials>, String> {
        let Some(user) = &self.user else { return Ok(None) };
        let password = match std::env::var(PASSWORD_ENV) {
            Ok(password) => password,
            Err(_) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => {
                rpassword::prompt_password(format!("Password for {user}: "))
                    .map_err(|error| format!("cannot read the password: {error}"))?
            }
            Err(_) => {
                return Err(format!(
                    "--user {user} needs a password: set {PASSWORD_ENV} (it is never taken from the command line)"
                ))
            }
        };
        Ok(Some(ferrite_client::UserCredentials::new(user.clone(), password)))
    }

    /// TLS as the options ask for it: with a CA file (given or from `FERRITE_CA`), or none.
    pub fn tls_options(&self) -> Option<ferrite_client::TlsOptions> {
        self.ca.as_ref().map(|ca| ferrite_client::TlsOptions {
            ca_file: ca.clone(),
            client_cert: self.client_cert.clone().zip(self.client_key.clone()),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, open, delete and list pools.
    #[command(subcommand)]
    Pool(PoolCommand),

    /// Store a value under a key. Values past 2 MiB travel as direct transfers, up to the
    /// server's `limits.direct_value_bytes_max` (1 GiB by default).
    Put {
        pool: String,
        key: String,
        /// The value; `-` reads it from standard input as raw bytes (at most 4 GiB).
        value: String,
        #[command(flatten)]
        mode: PutMode,
        /// Write VALUE's bytes at this byte of the key's existing value instead of replacing it
        /// (the value keeps its length; the range must lie inside it). Each 2 MiB is written
        /// atomically.
        #[arg(long, value_name = "BYTES", conflicts_with_all = ["create_only", "update_only"])]
        offset: Option<u64>,
    },

    /// Print a key's value, or a slice of it: the raw bytes, with no newline added. Large values
    /// stream to standard output without being held whole in memory.
    Get {
        pool: String,
        key: String,
        /// Start at this byte of the value (0 by default); past the value's end is an error.
        #[arg(long, value_name = "BYTES")]
        offset: Option<u64>,
        /// Print at most this many bytes (by default, up to the value's end).
        #[arg(long, value_name = "BYTES")]
        length: Option<u64>,
    },

    /// Remove a key and its value.
    Erase { pool: String, key: String },

    /// Print the number of key-value pairs in a pool.
    Count { pool: String },

    /// Show a value's length, CRC-32 and write time, or the pool's attributes if no key is given.
    Attr { pool: String, key: Option<String> },

    /// List the keys of a pool that match a pattern, in key order (all keys by default).
    Find {
        pool: String,
        #[command(flatten)]
        pattern: FindPattern,
        /// Stop after this many keys.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },

    /// Run a pool's plugins on a key (or, with an empty KEY, on the pool) and print each
    /// response buffer raw, one per line.
    Invoke {
        pool: String,
        /// The key whose value the plugins work on; "" invokes them on the pool itself.
        key: String,
        /// What the plugins are asked to do; `-` reads it from standard input as raw bytes.
        payload: String,
        #[command(flatten)]
        mode: InvokeMode,
    },

    /// Show every shard's counters.
    Stats,

    /// Back up every shard into DIR while the server keeps serving: each shard copies its last
    /// checkpoint and its log up to the last write it had applied into DIR/shard-N. DIR is on the
    /// server's machine (a relative DIR is taken from this command's working directory) and must
    /// not hold a backup of these shards yet. Restore with `ferrite-server --restore DIR
    /// --data-dir NEW_DIR`; verify with `ferrite check DIR`.
    Backup {
        /// Directory to write the backup into (created if missing).
        dir: std::path::PathBuf,
    },

    /// Measure throughput and latency with many requests in flight (see `ferrite bench --help`).
    Bench(crate::bench::BenchArgs),

    /// Verify a stopped server's data directory offline: checkpoints, write-ahead log and every
    /// pool's hash table. Exits with status 1 if anything is damaged.
    Check {
        /// The server's data directory (its `data_dir` setting), or a backup.
        data_dir: std::path::PathBuf,
        /// Show how far the check is on standard error even when it is not a terminal (on one
        /// it is shown anyway); only for 64 MiB of files or more (or FERRITE_PROGRESS_BYTES).
        #[arg(long)]
        progress: bool,
    },

    /// Add, change and remove the users of a server's users file (`ferrite-server --users FILE`).
    /// Works on the file alone, with no server: a running server applies the edit on SIGHUP.
    #[command(subcommand)]
    User(UserCommand),

    /// Form a cluster of servers started with --node-id, add and remove nodes, move leaders, and
    /// show each group's replicas. Needs `admin` on every pool on a server with users.
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

/// `ferrite cluster`. Every group (shard index) is administered in turn; --addr names any node
/// of the cluster, except for `init`, which talks to the nodes it names.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Make the nodes at these addresses the first members of every group: asks each node who it
    /// is, then initializes each group on every one of them. Every node must run with its own
    /// --node-id and the same number of shards, and be in no cluster yet. --addr is not used.
    Init {
        /// The native address of a first member (its shard 0); give one --node per node.
        #[arg(long = "node", value_name = "HOST:PORT", required = true)]
        nodes: Vec<String>,
    },

    /// Add the node at ADDR (started with --node-id, in no cluster yet) to every group, group by
    /// group through each group's leader: the node first receives the group's data, then
    /// votes. Groups it is a voter of already are skipped, so the command can be run again after
    /// an interruption.
    AddNode {
        /// The new node's native address (its shard 0).
        #[arg(value_name = "ADDR")]
        node: String,
    },

    /// Remove the node NODE_ID from every group it is a member of.
    RemoveNode {
        #[arg(value_name = "NODE_ID", value_parser = parse_node_id)]
        node_id: u64,
    },

    /// Hand the leadership of group G to the member NODE_ID; without --group, of every group the
    /// node at --addr leads (to move every leader off a node before its maintenance).
    TransferLeader {
        /// The group (shard index); all the groups --addr's node leads when not given.
        #[arg(long, value_name = "G")]
        group: Option<u16>,
        /// The node to lead.
        #[arg(long, value_name = "NODE_ID", value_parser = parse_node_id)]
        to: u64,
    },

    /// Each group's replicas, as each member node reports its own: role, leader, term, last log
    /// index, commit index, applied index, snapshot index and, for followers, how many entries
    /// they lag behind the leader. A server not in cluster mode shows itself leading every group.
    Status,

    /// Start a cluster of N nodes on this machine, for trying and testing: N ferrite-server
    /// processes on loopback (the one beside this `ferrite`, or the first on PATH), node I with
    /// its data in DIR/node-I, initialized as `cluster init` does. Prints each node's addresses
    /// and pid, then keeps running: a node that exits is reported, not restarted (start it again
    /// with the command line in DIR/node-I/command); Ctrl-C or SIGTERM stops every node. Ports
    /// are chosen free at the first run and kept in DIR/nodes: a later run on DIR starts the
    /// same cluster again, with its data. --addr and the TLS and user options are not used.
    Local(LocalArgs),
}

/// `ferrite cluster local`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// How many nodes to start (1 to 9; 3 tolerates the loss of one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=9))]
    pub nodes: u16,
    /// Where the nodes keep their data (DIR/node-I), logs (DIR/node-I/server.log) and command
    /// lines (DIR/node-I/command); created if missing.
    #[arg(long, value_name = "DIR")]
    pub data_dir: std::path::PathBuf,
    /// Shards per node (groups of the cluster): node ports are base..base+S-1.
    #[arg(long, value_name = "S", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub shards: u16,
}

/// A node id: a whole number from 1 (0 stands for a server not in cluster mode).
fn parse_node_id(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) | Err(_) => Err("node ids are whole numbers from 1".to_owned()),
        Ok(id) => Ok(id),
    }
}

/// How `find` matches keys; at most one may be given.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct FindPattern {
    /// Keys starting with PREFIX.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Keys in which the regular expression finds a match (anchor it with ^ and $).
    #[arg(long)]
    pub regex: Option<String>,
    /// Keys matching a Redis-style glob: *, ?, [a-z], [^x].
    #[arg(long)]
    pub glob: Option<String>,
    /// The key equal to KEY, if present.
    #[arg(long)]
    pub exact: Option<String>,
    /// The keys after KEY in key order (MCAS `next:`; with `--limit 1`, the first one). Needs
    /// a pool with a secondary index.
    #[arg(long, value_name = "KEY")]
    pub next: Option<String>,
}

/// What `pool configure` changes: exactly one setting.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct PoolSettingArg {
    /// Build a secondary index over the pool's keys.
    #[arg(long)]
    pub add_index: bool,
    /// Drop the pool's secondary index.
    #[arg(long)]
    pub remove_index: bool,
}

#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct PutMode {
    /// Fail if the key already exists instead of replacing its value.
    #[arg(long)]
    pub create_only: bool,
    /// Fail if the key does not exist instead of inserting it.
    #[arg(long)]
    pub update_only: bool,
    /// sync: return once the write is on stable storage; async: once it is applied (durable
    /// within the server's commit interval). Default: the pool's own durability.
    #[arg(long, value_name = "sync|async")]
    pub durability: Option<ferrite_client::Durability>,
}

/// How `invoke` treats the key's value. Contradictions are usage errors: the put-only flags need
/// `--put`, a read-only call cannot put, and a put creates the key by itself.
#[derive(Debug, Args)]
pub struct InvokeMode {
    /// Store VALUE under the key first, then run the plugins on it, in one request.
    #[arg(long, value_name = "VALUE", conflicts_with_all = ["create_size", "read_only"])]
    pub put: Option<String>,
    /// Create an absent key with a zeroed value of this size (suffixes as for `pool create`).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub create_size: Option<u64>,
    /// Run the plugins under a read lock: they may not write.
    #[arg(long)]
    pub read_only: bool,
    /// With --put: keep an existing value; the plugins run on it.
    #[arg(long, requires = "put")]
    pub no_overwrite: bool,
    /// With --put: put the value in unattached pool memory and hand the plugins its location,
    /// instead of making it the key's value.
    #[arg(long, requires = "put")]
    pub detached: bool,
    /// Return once the server accepts the call, without waiting for the plugins (nothing is
    /// printed, and a plugin's failure goes unreported).
    #[arg(long)]
    pub fire_and_forget: bool,
    /// The old name of --fire-and-forget, which it means still, with a warning: `async` names a
    /// durability everywhere else.
    #[arg(long = "async", hide = true)]
    pub deprecated_async: bool,
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool, or open it if it exists (see --create-only). An existing pool must match
    /// the --size, --indexed, --durability and --plugins given (those not given do not matter):
    /// one that differs is refused, each difference named, and left as it is.
    Create {
        name: String,
        /// Capacity: key bytes + value bytes + 64 bytes per pair (64 MiB when not given). Accepts
        /// K, M, G, T and KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000).
        #[arg(long, value_name = "BYTES", value_parser = parse_size)]
        size: Option<u64>,
        /// Sizing hint for a new pool's hash table (an existing pool's table has grown as it
        /// needed).
        #[arg(long, value_name = "N", default_value_t = 1024)]
        expected_objects: u64,
        /// Fail if the pool already exists instead of opening it.
        #[arg(long)]
        create_only: bool,
        /// Keep a secondary index over the keys, so searches run in key order (about 70 bytes per
        /// key).
        #[arg(long)]
        indexed: bool,
        /// Durability of writes that do not choose one: sync (acknowledged once on stable
        /// storage; the default) or async (acknowledged once applied; durable within the commit
        /// interval).
        #[arg(long, value_name = "sync|async")]
        durability: Option<ferrite_client::Durability>,
        /// The pool's chain of Active Data Object plugins, comma-separated, in the order they
        /// run: names the server knows (shipped plugins, its [plugins] table, --plugin).
        #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
        plugins: Vec<String>,
    },

    /// Open a pool, print what it holds, and close it.
    Open { name: String },

    /// Delete a pool and all its pairs. Refused while any session has it open.
    Delete { name: String },

    /// Add or remove an existing pool's secondary index (which `find` searches in key order and
    /// `find --next` needs). The server builds an index in steps while it serves; the command
    /// returns once it is whole.
    Configure {
        name: String,
        #[command(flatten)]
        setting: PoolSettingArg,
    },

    /// List the pools of every shard.
    List,
}

/// `ferrite user`. Secrets never come from the command line, where `ps` and shell history would
/// keep them: they are asked for at a terminal, or read as one line of standard input.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user, with a password (asked twice at a terminal, otherwise one line of standard
    /// input) and/or a client certificate. Creates the file if it does not exist.
    Add {
        /// The user's name: 1 to 64 letters, digits, '_', '-', '.' or '@'.
        name: String,
        #[command(flatten)]
        file: UsersFileArg,
        /// PEM file with the client certificate that identifies the user over mutual TLS; its
        /// SHA-256 fingerprint is stored.
        #[arg(long, value_name = "CERT.pem")]
        certificate: Option<std::path::PathBuf>,
        /// Give the user no password: it proves itself with its certificate alone.
        #[arg(long, requires = "certificate")]
        no_password: bool,
    },

    /// Replace a user's password (read as for `add`).
    Passwd {
        /// The user's name.
        name: String,
        #[command(flatten)]
        file: UsersFileArg,
    },

    /// Delete a user.
    Del {
        /// The user's name.
        name: String,
        #[command(flatten)]
        file: UsersFileArg,
    },

    /// Give a user rights on the pools a pattern names, added to those it has there already.
    Grant(GrantArgs),

    /// Take rights back from the grant on exactly this pattern (revoking `orders` leaves
    /// `orders*`); a grant left with no rights goes.
    Revoke(GrantArgs),

    /// Set a user's quota, replacing the one it had; a limit not given is no limit.
    Quota {
        /// The user's name.
        name: String,
        #[command(flatten)]
        file: UsersFileArg,
        /// Connections open at once, over every shard and both protocols.
        #[arg(long, value_name = "N")]
        connections: Option<u64>,
        /// Pools it created that still exist.
        #[arg(long, value_name = "N")]
        pools: Option<u64>,
        /// The sizes of those pools, added up (suffixes as for `pool create`).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        pool_bytes: Option<u64>,
    },

    /// List the users: how each proves itself, its grants and its quota (never a password hash).
    List {
        #[command(flatten)]
        file: UsersFileArg,
    },
}

impl UserCommand {
    /// The users file the command works on.
    pub fn file(&self) -> &UsersFileArg {
        match self {
            UserCommand::Add { file, .. }
            | UserCommand::Passwd { file, .. }
            | UserCommand::Del { file, .. }
            | UserCommand::Grant(GrantArgs { file, .. })
            | UserCommand::Revoke(GrantArgs { file, .. })
            | UserCommand::Quota { file, .. }
            | UserCommand::List { file } => file,
        }
    }
}

/// A user, a pool pattern and rights: what `ferrite user grant` gives and `revoke` takes back.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The user's name.
    pub name: String,
    /// A pool name, a prefix ending in `*` (`orders*`), or `*` for every pool; a revoke names
    /// the pattern exactly as it was granted.
    #[arg(value_parser = PoolPattern::new)]
    pub pools: PoolPattern,
    /// Comma-separated: read, write, invoke, admin, or all.
    #[arg(value_parser = Rights::parse_list)]
    pub rights: Rights,
    #[command(flatten)]
    pub file: UsersFileArg,
}

/// The users file every `ferrite user` command works on. Required rather than defaulted: editing
/// a file the server does not read would look like success and change nothing.
#[derive(Debug, Args)]
pub struct UsersFileArg {
    /// The users file (the server's `--users FILE` or `[auth] users_file`).
    #[arg(long = "file", value_name = "FILE")]
    pub path: std::path::PathBuf,
}

/// Parses a byte count such as `4096`, `64M`, `64MiB` or `2GB` (whole numbers only).
///
/// Single letters mean powers of 1024, as in most storage tools (`qemu-img`, `dd`), because pool
/// sizes are memory sizes; the explicit SI spellings `KB`/`MB`/... mean powers of 1000 for those
/// who need them. Case and a space before the unit are ignored. Zero is refused: a pool needs
/// room.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!("{text:?} is not a size: expected a whole number such as 4096 or 64MiB"));
    }
    let number: u64 = digits.parse().map_err(|_| format!("{text:?} is too large"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?}: use B, K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
            ))
        }
    };
    let bytes = number.checked_mul(multiplier).ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes == 0 {
        return Err("size must be greater than zero".to_owned());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn sizes_in_bytes_and_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 * 1024));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
    }

    #[test]
    fn si_units_are_powers_of_1000() {
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("3gb"), Ok(3_000_000_000));
    }

    #[test]
    fn bad_sizes_are_refused_with_a_reason() {
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("1.5G").is_err_and(|e| e.contains("unknown size unit")));
        assert!(parse_size("64XB").is_err_and(|e| e.contains("unknown size unit")));
        assert!(parse_size("0").is_err_and(|e| e.contains("greater than zero")));
        assert!(parse_size("99999999999999999999").is_err_and(|e| e.contains("too large")));
        assert!(parse_size("16777216T").is_err_and(|e| e.contains("too large")));
    }

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn put_modes_exclude_each_other() {
        let both = Cli::try_parse_from(["ferrite", "put", "p", "k", "v", "--create-only", "--update-only"]);
        assert!(both.is_err());
        let cli = Cli::try_parse_from(["ferrite", "--json", "put", "p", "k", "-", "--update-only"]).expect("valid");
        assert!(cli.json);
        assert!(
            matches!(cli.command, Command::Put { ref value, mode: PutMode { update_only: true, .. }, .. } if value == "-")
        );
    }

    #[test]
    fn durability_is_sync_or_async() {
        let cli = Cli::try_parse_from(["ferrite", "put", "p", "k", "v", "--durability", "async"]).expect("valid");
        assert!(matches!(
            cli.command,
            Command::Put { mode: PutMode { durability: Some(ferrite_client::Durability::Async), .. }, .. }
        ));
        assert!(Cli::try_parse_from(["ferrite", "put", "p", "k", "v", "--durability", "eventually"]).is_err());
        let cli = Cli::try_parse_from(["ferrite", "pool", "create", "p"]).expect("valid");
        assert!(matches!(cli.command, Command::Pool(PoolCommand::Create { durability: None, .. })), "not given");
    }

    fn invoke_mode(args: &[&str]) -> Result<InvokeMode, clap::Error> {
        let argv = ["ferrite", "invoke", "p", "k", "add 1"].iter().chain(args).copied();
        match Cli::try_parse_from(argv)?.command {
            Command::Invoke { mode, .. } => Ok(mode),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn invoke_takes_pool_key_payload_and_its_modes() {
        let cli = Cli::try_parse_from(["ferrite", "invoke", "p", "", "-"]).expect("valid");
        assert!(
            matches!(cli.command, Command::Invoke { ref key, ref payload, .. } if key.is_empty() && payload == "-")
        );
        let mode = invoke_mode(&["--create-size", "4KiB", "--read-only", "--fire-and-forget"]).expect("valid");
        assert_eq!(mode.create_size, Some(4096));
        assert!(mode.read_only && mode.fire_and_forget && mode.put.is_none());
        assert!(invoke_mode(&["--async"]).expect("the deprecated name").deprecated_async);
        let mode = invoke_mode(&["--put", "v1", "--no-overwrite", "--detached"]).expect("valid");
        assert_eq!(mode.put.as_deref(), Some("v1"));
        assert!(mode.no_overwrite && mode.detached && !mode.read_only);
    }

    #[test]
    fn key_less_invocations_cannot_put_or_create() {
        let contradiction =
            |args: &[&str]| Cli::try_parse_from(args).expect("parses").contradiction().map(|(_, message)| message);
        assert_eq!(contradiction(&["ferrite", "invoke", "p", "", "get"]), None);
        assert!(contradiction(&["ferrite", "invoke", "p", "", "x", "--put", "v"])
            .is_some_and(|e| e.starts_with("--put needs a KEY")));
        assert!(contradiction(&["ferrite", "invoke", "p", "", "x", "--create-size", "8"])
            .is_some_and(|e| e.starts_with("--create-size needs a KEY")));
        assert_eq!(contradiction(&["ferrite", "invoke", "p", "k", "x", "--put", "v"]), None);
    }

    /// Proves the flag combinations no invocation means are usage errors, before any connection.
    #[test]
    fn invoke_refuses_contradictory_flags() {
        for args in [
            &["--no-overwrite"][..],
            &["--detached"],
            &["--put", "v", "--create-size", "8"],
            &["--put", "v", "--read-only"],
            &["--create-size", "0"],
        ] {
            assert!(invoke_mode(args).is_err(), "{args:?} accepted");
        }
    }

    /// Proves `add-node`'s address and the global --addr stay apart: the node that is added is
    /// not the node the command is sent through.
    #[test]
    fn add_node_keeps_its_address_apart_from_addr() {
        let cli = Cli::try_parse_from(["ferrite", "--addr", "10.0.0.1:7100", "cluster", "add-node", "10.0.0.4:7100"])
            .expect("valid");
        assert_eq!(cli.addr, "10.0.0.1:7100");
        let Command::Cluster(ClusterCommand::AddNode { node }) = cli.command else { panic!("cluster add-node") };
        assert_eq!(node, "10.0.0.4:7100");
    }

    #[test]
    fn pool_create_takes_a_plugin_chain_in_order() {
        let cli =
            Cli::try_parse_from(["ferrite", "pool", "create", "p", "--plugins", "counter,versioning"]).expect("valid");
        let Command::Pool(PoolCommand::Create { plugins, .. }) = cli.command else { panic!("pool create") };
        assert_eq!(plugins, ["counter", "versioning"]);
    }

    #[test]
    fn pool_create_takes_size_suffixes() {
        let cli = Cli::try_parse_from(["ferrite", "pool", "create", "demo", "--size", "1GiB", "--create-only"])
            .expect("valid");
        assert!(matches!(
            cli.command,
            Command::Pool(PoolCommand::Create {
                size: Some(1_073_741_824),
                expected_objects: 1024,
                create_only: true,
                ..
            })
        ));
    }
}
