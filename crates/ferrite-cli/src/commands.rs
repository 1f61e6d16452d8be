//! Carrying out each command with the blocking client, and turning failures into messages that
//! say what to do next.

use std::fmt;
use std::io::{self, IsTerminal, Read, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use ferrite_client::{
    blocking, Attribute, ClientOptions, Error, ErrorCode, FindKind, InvokeOptions, InvokePutOptions, InvokeResponse,
    PoolInfo, PutFlags, DIRECT_THRESHOLD_BYTES, FIND_KEYS_MAX,
};
use serde_json::json;

use crate::args::{Cli, Command, FindPattern, InvokeMode, PutMode};
use crate::output::{bytes_json, fields, format_bytes, format_timestamp_ns, hex, Report, Table};
use crate::pools::{format_bytes_per_key, format_load, pools_json};

/// A failure to connect, with what to try next where the error alone does not say: an address
/// where nothing answered may be the wrong one; a TLS server reached in clear wants `--ca`. A
/// server that answered (a refused certificate, a wrong password) is not suspected of being
/// absent.
pub fn connect_error(error: Error) -> String {
    if error.is_unreachable() {
        format!("{error}\n(is ferrite-server running there? choose the server with --addr or FERRITE_ADDR)")
    } else if error.is_tls_required() {
        format!("{error}\n(give the CA that signed its certificate with --ca FILE or FERRITE_CA)")
    } else {
        error.to_string()
    }
}

/// A failure to report as `error: <message>`.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for CliError {
    fn from(error: Error) -> Self {
        CliError(error.to_string())
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

/// Most bytes `-` reads from standard input. A direct value's length is 32 bits on the wire (and a
/// server allows at most its `limits.direct_value_bytes_max`, 1 GiB by default), so a longer
/// input could never be stored: it is refused rather than read into memory for nothing.
const STDIN_BYTES_MAX: u64 = 4 << 30;

/// A put or get moving more than this shows a progress line on a terminal; a smaller one is over
/// before the line would be worth reading.
const PROGRESS_BYTES_MIN: u64 = 64 << 20;

/// The progress line is redrawn at most this often (four times a second).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// Carriage return and ANSI "erase to end of line": the progress line is redrawn in place.
const REDRAW_LINE: &str = "\r\x1b[K";

/// Buffer between a streamed value and standard output: pieces arrive 1 MiB at a time
/// (`ferrite_client::PIECE_BYTES_MAX`) and go straight through; the buffer gathers the odd
/// smaller ones.
const STDOUT_BUFFER_BYTES: usize = 256 * 1024;

pub fn run(cli: &Cli) -> Result<Report> {
    let options = ClientOptions {
        client_name: concat!("ferrite-cli/", env!("CARGO_PKG_VERSION")).to_owned(),
        tls: cli.tls_options(),
        credentials: cli.credentials().map_err(CliError)?,
        ..ClientOptions::default()
    };
    if let Command::Cluster(command) = &cli.command {
        // It connects to the nodes it needs, which are not always --addr.
        return crate::cluster::run(cli, command, &options);
    }
    let session = connect(&cli.addr, options)?;
    match &cli.command {
        Command::Pool(command) => crate::pools::run(&session, command),
        Command::Put { pool, key, value, mode, offset: None } => put(&session, pool, key, value, mode),
        Command::Put { pool, key, value, mode, offset: Some(offset) } => {
            put_at(&session, pool, key, value, *offset, mode)
        }
        Command::Get { pool, key, offset, length } => get(&session, pool, key, *offset, *length, cli.json),
        Command::Erase { pool, key } => erase(&session, pool, key),
        Command::Count { pool } => count(&session, pool),
        Command::Attr { pool, key: Some(key) } => value_attributes(&session, pool, key),
        Command::Attr { pool, key: None } => crate::pools::describe(&session, pool, false),
        Command::Find { pool, pattern, limit } => find(&session, pool, pattern, *limit),
        Command::Invoke { pool, key, payload, mode } => invoke(&session, pool, key, payload, mode),
        Command::Stats => statistics(&session),
        Command::Backup { dir } => back_up(&session, dir),
        Command::Bench(_) => unreachable!("main runs `bench` itself, on its own runtime"),
        Command::Check { .. } => unreachable!("main runs `check` itself: it needs no server"),
        Command::User(_) => unreachable!("main runs `user` itself: it needs no server"),
        Command::Cluster(_) => unreachable!("run hands `cluster` on before connecting"),
    }
}

/// A session with the server at `address`, failing with what to try next.
pub fn connect(address: &str, options: ClientOptions) -> Result<blocking::Session> {
    blocking::Session::connect_with(address, options).map_err(|error| CliError(connect_error(error)))
}

/// `put --offset`: bytes written inside an existing value (`put_direct_offset`).
fn put_at(
    session: &blocking::Session,
    pool_name: &str,
    key: &str,
    bytes: &str,
    offset: u64,
    mode: &PutMode,
) -> Result<Report> {
    let bytes = argument_bytes(bytes, "value")?;
    let flags = mode.durability.map_or(PutFlags::NONE, |durability| PutFlags::NONE.with_durability(durability));
    let pool = open_pool(session, pool_name)?;
    pool.put_direct_offset_with(key, offset, &bytes, flags).map_err(|error| match error.code() {
        Some(ErrorCode::KeyNotFound) => CliError(format!("key '{key}' does not exist in pool '{pool_name}'")),
        _ => error.into(),
    })?;
    pool.close()?;
    Ok(Report::text(
        format!("wrote {} at offset {offset} of '{key}' in pool '{pool_name}'", format_bytes(bytes.len() as u64)),
        json!({ "pool": pool_name, "key": key, "offset": offset, "length": bytes.len() }),
    ))
}

fn put(session: &blocking::Session, pool_name: &str, key: &str, value: &str, mode: &PutMode) -> Result<Report> {
    let value = argument_bytes(value, "value")?;
    let mut flags = match mode {
        PutMode { create_only: true, .. } => PutFlags::CREATE_ONLY,
        PutMode { update_only: true, .. } => PutFlags::UPDATE_ONLY,
        PutMode { .. } => PutFlags::NONE,
    };
    if let Some(durability) = mode.durability {
        flags = flags.with_durability(durability);
    }
    let pool = open_pool(session, pool_name)?;
    let length = value.len() as u64;
    // The client sends a large value's pieces without reporting each, so while it works the line
    // can only show the time; the rate comes at the end.
    let show_progress = stderr_shows_progress(Some(length));
    let started = Instant::now();
    let label = format!("storing {} under '{key}'", format_bytes(length));
    let stored = while_ticking(&label, show_progress, || pool.put_with(key, &value, flags));
    let elapsed = started.elapsed();
    stored.map_err(|error| match error.code() {
        Some(ErrorCode::KeyExists) => {
            CliError(format!("key '{key}' already exists in pool '{pool_name}' (--create-only was given)"))
        }
        Some(ErrorCode::KeyNotFound) => {
            CliError(format!("key '{key}' does not exist in pool '{pool_name}' (--update-only was given)"))
        }
        Some(ErrorCode::PoolFull) => {
            CliError(format!("pool '{pool_name}' has no room for {} more bytes ({error})", key.len() + value.len()))
        }
        _ => error.into(),
    })?;
    pool.close()?;
    if show_progress {
        eprintln!(
            "stored {length} bytes in {:.2} s ({:.1} MiB/s)",
            elapsed.as_secs_f64(),
            mib_per_second(length, elapsed)
        );
    }
    Ok(Report::text(
        format!("stored {} under '{key}' in pool '{pool_name}'", format_bytes(length)),
        json!({ "pool": pool_name, "key": key, "stored": true, "length": value.len() }),
    ))
}

/// The bytes of an argument that may be `-`, meaning standard input read to its end.
fn argument_bytes(argument: &str, what: &str) -> Result<Vec<u8>> {
    if argument != "-" {
        return Ok(argument.as_bytes().to_vec());
    }
    let stdin = io::stdin();
    let remaining = stdin_file_remaining(&stdin);
    let progress = Progress::on_stderr(format!("reading the {what} from standard input"), remaining);
    let reader = ProgressReader { inner: stdin.lock(), done: 0, progress };
    match read_bounded(reader, remaining, STDIN_BYTES_MAX) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(CliError(format!(
            "the {what} on standard input is longer than {} ({STDIN_BYTES_MAX} bytes), more than any server \
             stores; a server takes values up to its limits.direct_value_bytes_max (1 GiB by default)",
            format_bytes(STDIN_BYTES_MAX)
        ))),
        Err(error) => Err(CliError(format!("reading the {what} from standard input: {error}"))),
    }
}

/// Bytes left to read from standard input when it is a regular file (`< file`): its size less
/// its position. `None` for a pipe or a terminal, whose length is known only at its end.
fn stdin_file_remaining(stdin: &io::Stdin) -> Option<u64> {
    let stat = rustix::fs::fstat(stdin).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let position = rustix::fs::seek(stdin, rustix::fs::SeekFrom::Current(0)).ok()?;
    u64::try_from(stat.st_size).ok().map(|size| size.saturating_sub(position))
}

/// Reads `reader` to its end into one buffer, or `None` if it holds more than `limit` bytes
/// (refused at once when `size_hint` already says so).
///
/// With a size hint (standard input redirected from a file) the buffer is allocated once at its
/// exact size: `read_to_end` then probes for the end with a small read on the stack instead of
/// growing it. A pipe's length is unknown until its end, so there the buffer grows by doubling;
/// the copies that costs add up to about one pass over the value (and large blocks are moved by
/// `mremap`, not copied), which is what reading it in chunks and joining them would cost too.
fn read_bounded(reader: impl Read, size_hint: Option<u64>, limit: u64) -> io::Result<Option<Vec<u8>>> {
    if size_hint.is_some_and(|hint| hint > limit) {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    if let Some(hint) = size_hint {
        let cannot_allocate =
            |reason: String| io::Error::new(io::ErrorKind::OutOfMemory, format!("cannot hold {hint} bytes: {reason}"));
        let hint = usize::try_from(hint).map_err(|error| cannot_allocate(error.to_string()))?;
        bytes.try_reserve_exact(hint).map_err(|error| cannot_allocate(error.to_string()))?;
    }
    reader.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// A reader that keeps a [`Progress`] line up to date with the bytes read through it.
#[derive(Debug)]
struct ProgressReader<R, W: Write> {
    inner: R,
    done: u64,
    progress: Progress<W>,
}

impl<R: Read, W: Write> Read for ProgressReader<R, W> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.done += read as u64;
        self.progress.update(self.done, Instant::now());
        Ok(read)
    }
}

/// Whether a transfer of `total` bytes (unknown: `None`) gets a progress line: only on a
/// terminal, so scripts and tests never see one, and only past [`PROGRESS_BYTES_MIN`].
fn stderr_shows_progress(total: Option<u64>) -> bool {
    io::stderr().is_terminal() && total.is_none_or(|total| total > PROGRESS_BYTES_MIN)
}

/// Runs `work` while a line on standard error shows `label` and the seconds gone, redrawn every
/// [`PROGRESS_INTERVAL`] from a second thread and erased when `work` returns (`show` false: just
/// runs it).
fn while_ticking<T>(label: &str, show: bool, work: impl FnOnce() -> T) -> T {
    if !show {
        return work();
    }
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let started = Instant::now();
            let mut stderr = io::stderr();
            // Ends when `done` is dropped, also if `work` panics.
            while let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(PROGRESS_INTERVAL) {
                let _ = write!(stderr, "{REDRAW_LINE}{label}: {:.1} s", started.elapsed().as_secs_f64());
                let _ = stderr.flush();
            }
            let _ = write!(stderr, "{REDRAW_LINE}");
            let _ = stderr.flush();
        });
        let result = work();
        drop(done);
        result
    })
}

/// One progress line on standard error for a transfer: bytes done of the total, and the rate.
///
/// Drawn only where [`stderr_shows_progress`] allows, and only once the transfer is known to
/// move more than [`PROGRESS_BYTES_MIN`] (its total, or the bytes done when the total is
/// unknown); redrawn at most every [`PROGRESS_INTERVAL`]; erased by [`Progress::finish`] or when
/// dropped, so an error message never lands after a half-drawn line. The clock is passed in, so
/// the rendering is tested with a `Vec` and made-up instants.
#[derive(Debug)]
struct Progress<W: Write> {
    /// Where the line goes; `None` when it is never drawn.
    out: Option<W>,
    label: String,
    total: Option<u64>,
    started: Instant,
    last_drawn: Instant,
    drawn: bool,
}

impl Progress<io::Stderr> {
    fn on_stderr(label: String, total: Option<u64>) -> Progress<io::Stderr> {
        let out = stderr_shows_progress(total).then(io::stderr);
        Progress::new(out, label, total, Instant::now())
    }
}

impl<W: Write> Progress<W> {
    fn new(out: Option<W>, label: String, total: Option<u64>, now: Instant) -> Progress<W> {
        Progress { out, label, total, started: now, last_drawn: now, drawn: false }
    }

    fn update(&mut self, done: u64, now: Instant) {
        let Some(out) = &mut self.out else { return };
        if self.total.unwrap_or(done) <= PROGRESS_BYTES_MIN || now.duration_since(self.last_drawn) < PROGRESS_INTERVAL {
            return;
        }
        self.last_drawn = now;
        self.drawn = true;
        let line = progress_line(&self.label, done, self.total, now.duration_since(self.started));
        // The line is a courtesy: failing to draw it must not fail the transfer.
        let _ = write!(out, "{REDRAW_LINE}{line}");
        let _ = out.flush();
    }

    fn finish(&mut self) {
        if let (true, Some(out)) = (self.drawn, &mut self.out) {
            let _ = write!(out, "{REDRAW_LINE}");
            let _ = out.flush();
        }
        self.drawn = false;
    }
}

impl<W: Write> Drop for Progress<W> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `label: 300 MiB / 1 GiB (29%), 150.0 MiB/s`, or without the total when it is unknown.
fn progress_line(label: &str, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let rate = mib_per_second(done, elapsed);
    match total {
        Some(total) => {
            let percent = done.saturating_mul(100).checked_div(total).unwrap_or(100);
            format!("{label}: {} / {} ({percent}%), {rate:.1} MiB/s", format_bytes(done), format_bytes(total))
        }
        None => format!("{label}: {}, {rate:.1} MiB/s", format_bytes(done)),
    }
}

fn mib_per_second(bytes: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        bytes as f64 / f64::from(1u32 << 20) / seconds
    } else {
        0.0
    }
}

fn invoke(session: &blocking::Session, pool_name: &str, key: &str, payload: &str, mode: &InvokeMode) -> Result<Report> {
    let payload = argument_bytes(payload, "payload")?;
    let pool = open_pool(session, pool_name)?;
    let buffers = match &mode.put {
        Some(value) => {
            let options = InvokePutOptions {
                no_overwrite: mode.no_overwrite,
                detached: mode.detached,
                fire_and_forget: mode.fire_and_forget,
            };
            pool.invoke_put(key.as_bytes(), value.as_bytes(), &payload, options)
        }
        None => {
            let options = InvokeOptions {
                create_size: mode.create_size,
                read_only: mode.read_only,
                fire_and_forget: mode.fire_and_forget,
            };
            pool.invoke(key.as_bytes(), &payload, options)
        }
    }
    .map_err(|error| {
        if error.is_key_not_found() {
            CliError(format!(
                "key '{key}' not found in pool '{pool_name}' (--create-size BYTES creates it, --put VALUE stores one)"
            ))
        } else {
            error.into()
        }
    })?;
    pool.close()?;
    Ok(invoke_report(&buffers))
}

/// Each buffer raw with a newline after it, as the plugins wrote it; in JSON, a list of
/// `{layer, data, hex}` where `data` is the text if the buffer is UTF-8 and `null` otherwise.
fn invoke_report(buffers: &[InvokeResponse]) -> Report {
    let mut raw = Vec::new();
    for buffer in buffers {
        raw.extend_from_slice(&buffer.data);
        raw.push(b'\n');
    }
    let json: Vec<serde_json::Value> = buffers
        .iter()
        .map(|buffer| {
            json!({
                "layer": buffer.layer,
                "data": std::str::from_utf8(&buffer.data).ok(),
                "hex": hex(&buffer.data),
            })
        })
        .collect();
    Report::raw(raw, json!(json))
}

/// `ferrite get`, by one of three paths chosen so a small value prints exactly as it always did
/// and a large one never sits whole in this process's memory:
///
/// - `--json` puts the value (or the slice) in one document, so it is read whole anyway: with
///   [`blocking::Pool::get`], which reads a value too large to come inline with a direct read,
///   or, for a slice, with a direct read gathered in memory.
/// - Raw, the whole value, at most [`DIRECT_THRESHOLD_BYTES`]: one inline get, as before.
/// - Raw, a larger value or any slice: a direct read streamed piece by piece to a locked,
///   buffered standard output, with a progress line on a terminal.
///
/// Raw output asks for the value's length first (one attribute request: a round trip, nothing
/// next to starting the process) to choose; rather than try an inline get and fall back, which
/// the client's `get` would do by reading the whole value into memory. Should the value grow
/// between the two requests, the inline get still returns it whole; should it shrink, a direct
/// read serves any length.
fn get(
    session: &blocking::Session,
    pool_name: &str,
    key: &str,
    offset: Option<u64>,
    length: Option<u64>,
    json: bool,
) -> Result<Report> {
    let sliced = offset.is_some() || length.is_some();
    let offset = offset.unwrap_or(0);
    let pool = open_pool(session, pool_name)?;
    let key_error = |error| key_error(error, pool_name, key);
    let report = if json && sliced {
        let mut value = Vec::new();
        let value_length = pool
            .get_direct_to(key, offset, length, |_, piece| {
                value.extend_from_slice(piece);
                Ok(())
            })
            .map_err(key_error)?;
        let (json_value, encoding) = bytes_json(&value);
        let json = json!({
            "pool": pool_name,
            "key": key,
            "offset": offset,
            "length": value.len(),
            "value_length": value_length,
            "encoding": encoding,
            "value": json_value,
        });
        Report::raw(value, json)
    } else {
        let value_length = if json { 0 } else { pool.attribute(Attribute::ValueLength, key).map_err(key_error)? };
        if json || (!sliced && value_length <= DIRECT_THRESHOLD_BYTES as u64) {
            let value = pool.get(key).map_err(key_error)?;
            let (json_value, encoding) = bytes_json(&value);
            let json = json!({
                "pool": pool_name,
                "key": key,
                "length": value.len(),
                "encoding": encoding,
                "value": json_value,
            });
            Report::raw(value, json)
        } else {
            stream_value(&pool, key, offset, length, value_length).map_err(key_error)?
        }
    };
    pool.close()?;
    Ok(report)
}

/// Writes `length` bytes (to the end with `None`) of `key`'s value from `offset` to standard
/// output as the pieces of a direct read arrive. The report it returns prints nothing more.
///
/// A reader that goes away early (`ferrite get p k | head -c 10`) ends the read and is not a
/// failure, as for a small value (see `main`). `value_length` only sizes the progress line.
fn stream_value(
    pool: &blocking::Pool,
    key: &str,
    offset: u64,
    length: Option<u64>,
    value_length: u64,
) -> std::result::Result<Report, Error> {
    let rest = value_length.saturating_sub(offset);
    let expected = length.map_or(rest, |length| length.min(rest));
    let mut progress = Progress::on_stderr(format!("reading '{key}'"), Some(expected));
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(STDOUT_BUFFER_BYTES, stdout.lock());
    let mut written = 0u64;
    let mut reader_gone = false;
    let read = pool.get_direct_to(key, offset, length, |_, piece| {
        out.write_all(piece).inspect_err(|error| reader_gone = error.kind() == io::ErrorKind::BrokenPipe)?;
        written += piece.len() as u64;
        progress.update(written, Instant::now());
        Ok(())
    });
    let read = read.and_then(|value_length| match out.flush() {
        Ok(()) => Ok(value_length),
        Err(error) => {
            reader_gone = error.kind() == io::ErrorKind::BrokenPipe;
            Err(Error::Io { context: "writing the value to standard output".to_owned(), source: error })
        }
    });
    progress.finish();
    let value_length = match read {
        Ok(value_length) => value_length,
        Err(_) if reader_gone => value_length,
        Err(error) => return Err(error),
    };
    Ok(Report::text(
        String::new(),
        json!({ "key": key, "offset": offset, "length": written, "value_length": value_length }),
    ))
}

fn erase(session: &blocking::Session, pool_name: &str, key: &str) -> Result<Report> {
    let pool = open_pool(session, pool_name)?;
    pool.erase(key).map_err(|error| key_error(error, pool_name, key))?;
    pool.close()?;
    Ok(Report::text(
        format!("erased '{key}' from pool '{pool_name}'"),
        json!({ "pool": pool_name, "key": key, "erased": true }),
    ))
}

fn count(session: &blocking::Session, pool_name: &str) -> Result<Report> {
    let pool = open_pool(session, pool_name)?;
    let count = pool.count()?;
    pool.close()?;
    Ok(Report::text(count.to_string(), json!({ "pool": pool_name, "count": count })))
}

fn find(session: &blocking::Session, pool_name: &str, pattern: &FindPattern, limit: Option<usize>) -> Result<Report> {
    let (kind, text) = match pattern {
        FindPattern { prefix: Some(text), .. } => (FindKind::Prefix, text.as_str()),
        FindPattern { regex: Some(text), .. } => (FindKind::Regex, text.as_str()),
        FindPattern { glob: Some(text), .. } => (FindKind::Glob, text.as_str()),
        FindPattern { exact: Some(text), .. } => (FindKind::Exact, text.as_str()),
        FindPattern { next: Some(text), .. } => (FindKind::Next, text.as_str()),
        _ => (FindKind::Prefix, ""),
    };
    let pool = open_pool(session, pool_name)?;
    let limit = limit.unwrap_or(usize::MAX);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    while keys.len() < limit {
        let page_limit = (limit - keys.len()).min(FIND_KEYS_MAX) as u32;
        let page = pool.find(kind, text.as_bytes(), after.as_deref(), page_limit)?;
        keys.extend(page.keys);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // A pool without an index is walked in hash order, and may repeat a key.
    keys.sort_unstable();
    keys.dedup();
    keys.truncate(limit);
    pool.close()?;
    let lines: Vec<String> = keys.iter().map(|key| String::from_utf8_lossy(key).into_owned()).collect();
    let json_keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|key| {
            let (key, encoding) = bytes_json(key);
            json!({ "key": key, "encoding": encoding })
        })
        .collect();
    Ok(Report::text(
        lines.join("\n"),
        json!({ "pool": pool_name, "kind": kind.name(), "pattern": text, "keys": json_keys }),
    ))
}

fn value_attributes(session: &blocking::Session, pool_name: &str, key: &str) -> Result<Report> {
    let pool = open_pool(session, pool_name)?;
    let attributes = pool.value_attributes(key).map_err(|error| key_error(error, pool_name, key))?;
    pool.close()?;
    let text = fields(&[
        ("pool", pool_name.to_owned()),
        ("key", key.to_owned()),
        ("length", bytes_with_exact(attributes.length)),
        ("crc32", format!("{:#010x}", attributes.crc32)),
        ("write_time", format_timestamp_ns(attributes.write_time_ns)),
    ]);
    Ok(Report::text(
        text,
        json!({
            "pool": pool_name,
            "key": key,
            "length": attributes.length,
            "crc32": attributes.crc32,
            "write_time_ns": attributes.write_time_ns,
            "write_time": format_timestamp_ns(attributes.write_time_ns),
        }),
    ))
}

/// The counters are the node's own; its pools, in a cluster, are listed by each group's leader,
/// so a node whose groups have no leader (not initialized yet, or an election running) shows its
/// counters and says why the pools are missing: `stats` is how containers check a node's health.
fn statistics(session: &blocking::Session) -> Result<Report> {
    let shards = session.statistics()?;
    let pools = match session.list_pools() {
        Ok(mut pools) => {
            pools.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(pools)
        }
        Err(error) if error.code() == Some(ErrorCode::NotLeader) => Err(error.to_string()),
        Err(error) => return Err(error.into()),
    };
    let users = user_quotas(&shards);
    let mut text = statistics_table(&shards);
    if !users.is_empty() {
        text.push('\n');
        text.push_str(&user_quota_table(&users));
    }
    let mut json = statistics_json(&shards);
    match &pools {
        Ok(pools) if pools.is_empty() => json["pools"] = json!([]),
        Ok(pools) => {
            text.push('\n');
            text.push_str(&pool_memory_table(pools));
            json["pools"] = json!(pools_json(pools));
        }
        Err(why) => {
            text.push_str(&format!("\npools: not listed: {why}\n"));
            json["pools_not_listed"] = json!(why);
        }
    }
    json["users"] = users
        .iter()
        .map(|(user, fields)| {
            let fields: serde_json::Map<String, serde_json::Value> =
                fields.iter().map(|(field, value)| ((*field).to_owned(), json!(value))).collect();
            (user.clone(), serde_json::Value::Object(fields))
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    Ok(Report::text(text, json))
}

/// `ferrite backup DIR`: one row per shard with the log record its copy ends at.
fn back_up(session: &blocking::Session, dir: &std::path::Path) -> Result<Report> {
    let dir = std::path::absolute(dir).map_err(|error| CliError(format!("{}: {error}", dir.display())))?;
    let shown = dir.to_str().ok_or_else(|| CliError(format!("{} is not valid UTF-8", dir.display())))?;
    // The copy runs on the server, which logs each shard's progress; here, on a terminal, the
    // time it has taken so far.
    let label = format!("backing up into {shown} (each shard's progress is in the server's log)");
    let shards = while_ticking(&label, io::stderr().is_terminal(), || session.back_up(shown))?;
    let mut table = Table::new(&[("SHARD", true), ("LSN", true), ("FILES", true), ("BYTES", true)]);
    for shard in &shards {
        table.row(vec![
            shard.shard.to_string(),
            shard.lsn.to_string(),
            shard.files.to_string(),
            shard.bytes.to_string(),
        ]);
    }
    let text = format!(
        "{}backed up {} shard(s) into {shown}\nverify: ferrite check {shown}\nrestore: ferrite-server --restore {shown} \
         --data-dir NEW_DIR\n",
        table.render(),
        shards.len()
    );
    let rows: Vec<_> = shards
        .iter()
        .map(|shard| json!({ "shard": shard.shard, "lsn": shard.lsn, "files": shard.files, "bytes": shard.bytes }))
        .collect();
    Ok(Report::text(text, json!({ "dir": shown, "shards": rows })))
}

/// One row per pool: its memory in use, per key, and by part (`docs/hstore.md` says what each
/// part counts).
fn pool_memory_table(pools: &[PoolInfo]) -> String {
    let mut table = Table::new(&[
        ("POOL", false),
        ("SHARD", true),
        ("OBJECTS", true),
        ("MEMORY", true),
        ("BYTES/KEY", true),
        ("LOAD", true),
        ("TABLE", true),
        ("SLABS", true),
        ("LARGE", true),
        ("OTHER", true),
        ("INDEX", true),
    ]);
    for pool in pools {
        let memory = &pool.memory;
        table.row(vec![
            pool.name.clone(),
            pool.shard.to_string(),
            pool.objects.to_string(),
            format_bytes(memory.total_bytes()),
            format_bytes_per_key(pool),
            format_load(pool),
            format_bytes(memory.table_bytes),
            format_bytes(memory.slab_bytes),
            format_bytes(memory.large_bytes),
            format_bytes(memory.other_bytes),
            format_bytes(memory.index_bytes),
        ]);
    }
    table.render()
}

/// One row per counter, one column per shard: counters are many and shards few, so this shape
/// stays narrow. Counters appear in the order the server sent them; a counter one shard lacks
/// shows as `-`.
/// The fields of a user's quota counters (`user.NAME.FIELD`), in the order they are shown.
const USER_QUOTA_FIELDS: [&str; 6] =
    ["connections", "connections_max", "pools", "pools_max", "pool_bytes", "pool_bytes_max"];

/// Each user's holdings and quota, from the `user.NAME.FIELD` counters a server with users
/// reports (on shard 0), by user name.
fn user_quotas(
    shards: &[ferrite_client::ShardStatistics],
) -> std::collections::BTreeMap<String, Vec<(&'static str, u64)>> {
    let mut users: std::collections::BTreeMap<String, Vec<(&'static str, u64)>> = Default::default();
    for (name, value) in shards.iter().flat_map(|shard| &shard.counters) {
        // A user's name may hold dots; a field never does.
        let Some((user, field)) = name.strip_prefix("user.").and_then(|rest| rest.rsplit_once('.')) else { continue };
        if let Some(field) = USER_QUOTA_FIELDS.iter().find(|known| **known == field) {
            users.entry(user.to_owned()).or_default().push((field, *value));
        }
    }
    users
}

/// One row per user: what it holds, against its quota (`-`: no limit).
fn user_quota_table(users: &std::collections::BTreeMap<String, Vec<(&'static str, u64)>>) -> String {
    let mut table = Table::new(&[("USER", false), ("CONNECTIONS", true), ("POOLS", true), ("POOL BYTES", true)]);
    for (user, fields) in users {
        let field = |name: &str| fields.iter().find(|(field, _)| *field == name).map(|(_, value)| *value);
        let against = |held: &str, max: &str, show: fn(u64) -> String| {
            let held = field(held).map_or_else(|| "0".to_owned(), show);
            match field(max) {
                Some(max) => format!("{held} / {}", show(max)),
                None => format!("{held} / -"),
            }
        };
        table.row(vec![
            user.clone(),
            against("connections", "connections_max", |n| n.to_string()),
            against("pools", "pools_max", |n| n.to_string()),
            against("pool_bytes", "pool_bytes_max", format_bytes),
        ]);
    }
    table.render()
}

fn statistics_table(shards: &[ferrite_client::ShardStatistics]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for shard in shards {
        for (name, _) in &shard.counters {
            if name.starts_with("user.") {
                // Shown in the table of users.
                continue;
            }
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    let headers: Vec<String> = shards.iter().map(|shard| format!("SHARD {}", shard.shard)).collect();
    let mut columns = vec![("COUNTER", false)];
    columns.extend(headers.iter().map(|header| (header.as_str(), true)));
    let mut table = Table::new(&columns);
    for name in names {
        let mut row = vec![name.to_owned()];
        row.extend(shards.iter().map(|shard| shard.get(name).map_or_else(|| "-".to_owned(), |v| v.to_string())));
        table.row(row);
    }
    table.render()
}

fn statistics_json(shards: &[ferrite_client::ShardStatistics]) -> serde_json::Value {
    let shards: Vec<_> = shards
        .iter()
        .map(|shard| {
            let counters: serde_json::Map<String, serde_json::Value> =
                shard.counters.iter().map(|(name, value)| (name.clone(), json!(value))).collect();
            json!({ "shard": shard.shard, "counters": counters })
        })
        .collect();
    json!({ "shards": shards })
}

/// Opens a pool for a one-shot command, turning "no such pool" into the command that fixes it.
pub fn open_pool(session: &blocking::Session, name: &str) -> Result<blocking::Pool> {
    session.open_pool(name).map_err(|error| {
        if error.is_pool_not_found() {
            CliError(format!(
                "pool '{name}' does not exist; create it with `ferrite pool create {}`",
                shell_quote(name)
            ))
        } else {
            error.into()
        }
    })
}

fn key_error(error: Error, pool_name: &str, key: &str) -> CliError {
    if error.is_key_not_found() {
        CliError(format!("key '{key}' not found in pool '{pool_name}'"))
    } else {
        error.into()
    }
}

pub fn bytes_with_exact(bytes: u64) -> String {
    if bytes < 1024 {
        format_bytes(bytes)
    } else {
        format!("{} ({bytes} bytes)", format_bytes(bytes))
    }
}

/// Quotes `text` for a POSIX shell when it holds anything but safe characters, so a suggested
/// command can be pasted as is.
pub fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '@' | '+'));
    if safe {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_client::{PoolMemory, ShardStatistics};

    fn shard(index: u16, counters: &[(&str, u64)]) -> ShardStatistics {
        ShardStatistics {
            shard: index,
            counters: counters.iter().map(|(name, value)| ((*name).to_owned(), *value)).collect(),
        }
    }

    #[test]
    fn statistics_table_has_a_column_per_shard() {
        let shards = [
            shard(0, &[("requests", 12), ("puts", 3)]),
            shard(1, &[("requests", 1500), ("puts", 0), ("new_counter", 9)]),
        ];
        assert_eq!(
            statistics_table(&shards),
            "COUNTER      SHARD 0  SHARD 1\n\
             requests          12     1500\n\
             puts               3        0\n\
             new_counter        -        9\n"
        );
    }

    #[test]
    fn statistics_json_is_one_object_per_shard() {
        let json = statistics_json(&[shard(0, &[("puts", 3)])]);
        assert_eq!(json, json!({ "shards": [{ "shard": 0, "counters": { "puts": 3 } }] }));
    }

    fn pool(name: &str, objects: u64, memory: PoolMemory) -> PoolInfo {
        PoolInfo {
            name: name.to_owned(),
            shard: 1,
            objects,
            size_bytes: 1 << 20,
            used_bytes: 0,
            open_count: 0,
            memory,
            plugins: Vec::new(),
            indexed: false,
            durability: ferrite_client::Durability::Sync,
        }
    }

    /// A pool's memory by part, its total over its pairs and its table's load; an empty pool has
    /// neither of the ratios, shown as `-` and `null`.
    #[test]
    fn pool_memory_shows_each_part_per_key_and_load() {
        let memory = PoolMemory {
            table_buckets: 1000,
            table_bytes: 64_000,
            slab_bytes: 4096,
            large_bytes: 0,
            other_bytes: 4160,
            index_bytes: 0,
        };
        let pools =
            [pool("a", 800, memory), pool("empty", 0, PoolMemory { other_bytes: 4160, ..PoolMemory::default() })];
        assert_eq!(
            pool_memory_table(&pools),
            "POOL   SHARD  OBJECTS    MEMORY  BYTES/KEY   LOAD     TABLE  SLABS  LARGE    OTHER  INDEX\n\
             a          1      800  70.6 KiB       90.3  0.800  62.5 KiB  4 KiB    0 B  4.1 KiB    0 B\n\
             empty      1        0   4.1 KiB          -      -       0 B    0 B    0 B  4.1 KiB    0 B\n"
        );
        let json = pools_json(&pools);
        assert_eq!(json[0]["memory"]["total_bytes"], 72_256);
        assert_eq!(json[0]["memory"]["bytes_per_key"], 90.32);
        assert_eq!(json[0]["memory"]["table_load"], 0.8);
        assert_eq!(json[1]["memory"]["bytes_per_key"], serde_json::Value::Null);
    }

    #[test]
    fn invoke_prints_each_buffer_raw_on_its_line_and_layers_in_json() {
        let buffers = [
            InvokeResponse { layer: 0, data: bytes::Bytes::from_static(b"42") },
            InvokeResponse { layer: 1, data: bytes::Bytes::from_static(&[0xff, 0x00]) },
        ];
        let report = invoke_report(&buffers);
        let mut out = Vec::new();
        report.write(false, &mut out).expect("write to a Vec");
        assert_eq!(out, b"42\n\xff\x00\n");
        assert_eq!(
            report.json,
            json!([
                { "layer": 0, "data": "42", "hex": "3432" },
                { "layer": 1, "data": null, "hex": "ff00" },
            ])
        );
        let mut out = Vec::new();
        invoke_report(&[]).write(false, &mut out).expect("write to a Vec");
        assert!(out.is_empty(), "a fire-and-forget call prints nothing");
    }

    #[test]
    fn suggested_commands_quote_unusual_names() {
        assert_eq!(shell_quote("demo-1"), "demo-1");
        assert_eq!(shell_quote("my pool"), "'my pool'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    /// Standard input is read whole up to the limit and refused past it, also when a file's size
    /// says so before any byte is read; a size hint allocates the buffer once, exactly.
    #[test]
    fn input_is_read_whole_up_to_the_limit() {
        let input = b"0123456789";
        assert_eq!(read_bounded(&input[..], None, 10).expect("read"), Some(input.to_vec()));
        assert_eq!(read_bounded(&input[..], None, 9).expect("read"), None);
        assert_eq!(read_bounded(&input[..], Some(11), 10).expect("read"), None, "refused by its size alone");
        let exact = read_bounded(&input[..], Some(10), 10).expect("read").expect("within the limit");
        assert_eq!((exact.as_slice(), exact.capacity()), (&input[..], 10), "one buffer of the exact size");
        let grown = read_bounded(&input[..], Some(4), 10).expect("read").expect("a file that grew");
        assert_eq!(grown, input, "a hint that falls short still reads everything");
        assert_eq!(read_bounded(&b""[..], Some(0), 10).expect("read"), Some(Vec::new()));
    }

    #[test]
    fn progress_lines_show_bytes_of_the_total_and_the_rate() {
        let second = Duration::from_secs(1);
        assert_eq!(
            progress_line("reading 'k'", 300 << 20, Some(1 << 30), 2 * second),
            "reading 'k': 300 MiB / 1 GiB (29%), 150.0 MiB/s"
        );
        assert_eq!(progress_line("reading", 96 << 20, None, second), "reading: 96 MiB, 96.0 MiB/s");
        assert_eq!(progress_line("x", 0, Some(0), Duration::ZERO), "x: 0 B / 0 B (100%), 0.0 MiB/s");
    }

    /// The line appears only for a transfer past 64 MiB, at most four times a second, and is
    /// erased at the end; an unknown total shows once the bytes done pass 64 MiB.
    #[test]
    fn progress_is_drawn_sparingly_and_erased() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut out = Vec::new();
        let mut small = Progress::new(Some(&mut out), "r".to_owned(), Some(PROGRESS_BYTES_MIN), start);
        small.update(PROGRESS_BYTES_MIN, at(1000));
        small.finish();
        drop(small);
        assert!(out.is_empty(), "64 MiB or less shows nothing");

        let mut large = Progress::new(Some(&mut out), "r".to_owned(), Some(1 << 30), start);
        large.update(1 << 20, at(100));
        large.update(256 << 20, at(300));
        large.update(300 << 20, at(400));
        large.update(512 << 20, at(600));
        large.finish();
        drop(large);
        let text = String::from_utf8(out).expect("UTF-8");
        let lines: Vec<&str> = text.split(REDRAW_LINE).collect();
        assert_eq!(lines, ["", "r: 256 MiB / 1 GiB (25%), 853.3 MiB/s", "r: 512 MiB / 1 GiB (50%), 853.3 MiB/s", ""]);

        let mut out = Vec::new();
        let mut unknown = Progress::new(Some(&mut out), "r".to_owned(), None, start);
        unknown.update(PROGRESS_BYTES_MIN, at(1000));
        unknown.update(PROGRESS_BYTES_MIN + 1, at(1000));
        drop(unknown);
        assert_eq!(out.iter().filter(|&&byte| byte == b'\r').count(), 2, "one line, erased on drop");
    }

    #[test]
    fn sizes_show_exact_bytes_beyond_a_kibibyte() {
        assert_eq!(bytes_with_exact(100), "100 B");
        assert_eq!(bytes_with_exact(64 << 20), "64 MiB (67108864 bytes)");
    }
}
