//! `ferrite-echo`: the "limit" server of the benchmarks.
//!
//! It speaks just enough of Ferrite's native protocol (and, with `--resp-listen`, of RESP) for
//! `ferrite bench` and `redis-benchmark` to run against it, and stores nothing: hello gets a
//! valid hello reply, pool requests get a handle, every put is `stored`, every get returns the
//! same value (empty unless `--get-value-size`), finds find nothing. Each shard is a thread with
//! a single-threaded tokio runtime and each connection runs the server's own loop (read whatever
//! arrived, answer every complete frame, write all answers at once), so a benchmark against it
//! measures what the protocol and the loopback transport cost at a given concurrency: the
//! ceiling a real server's figures are read against (`bench/compare`'s "limit" rows).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use clap::Parser;
use ferrite_proto::{
    Header, HelloReply, Limits, Opcode, PoolHandle, Request, Response, FRAME_BODY_BYTES_MAX, HEADER_BYTES,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How much room a read asks for (the server's own figure).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Answers are written once this much is buffered, so a deep pipeline of large gets cannot make
/// the echo buffer without bound.
const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// Largest RESP bulk string and array the echo accepts (Redis's own `proto-max-bulk-len` is
/// 512 MiB; a benchmark never comes near these).
const RESP_BULK_BYTES_MAX: usize = FRAME_BODY_BYTES_MAX;
const RESP_ARGS_MAX: usize = 1024;

/// Answers the native protocol (and RESP) without storing anything: the loopback ceiling for
/// `ferrite bench` and `redis-benchmark`.
#[derive(Debug, Parser)]
#[command(name = "ferrite-echo", version, about)]
struct Args {
    /// Listen for the native protocol on HOST:PORT; shard i on PORT+i. Port 0 gives every shard
    /// a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Also answer RESP on HOST:PORT; shard i on PORT+i (0: free ports).
    #[arg(long, value_name = "HOST:PORT")]
    resp_listen: Option<SocketAddr>,
    /// Number of shards: threads, each with its own ports and single-threaded event loop.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    shards: u16,
    /// Length of the value every get returns.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    get_value_size: usize,
    /// Length of the value every direct read (`get_direct`) announces; its pieces are zeros.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    direct_value_size: u64,
}

/// What every connection of the process answers with.
#[derive(Debug)]
struct Script {
    /// Every shard's native address, for the hello reply.
    addresses: Vec<String>,
    value: Vec<u8>,
    /// The RESP reply to GET: the value as a bulk string.
    resp_value: Vec<u8>,
    /// What `get_direct` announces, and zeros its `direct_read` pieces are cut from.
    direct_value_size: u64,
    pieces: Vec<u8>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let bind = |base: SocketAddr, shard: u16| {
        let mut address = base;
        if base.port() != 0 {
            let port =
                base.port().checked_add(shard).ok_or_else(|| format!("port {} + {shard} is too high", base.port()))?;
            address.set_port(port);
        }
        let listener = std::net::TcpListener::bind(address).map_err(|e| format!("binding {address}: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("{address}: {e}"))?;
        Ok::<_, String>(listener)
    };
    let mut shards = Vec::new();
    for shard in 0..args.shards {
        let native = bind(args.listen, shard)?;
        let resp = args.resp_listen.map(|base| bind(base, shard)).transpose()?;
        shards.push((native, resp));
    }
    let addresses: Vec<String> = shards
        .iter()
        .map(|(native, _)| native.local_addr().map(|a| a.to_string()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let value = vec![b'x'; args.get_value_size];
    let mut resp_value = format!("${}\r\n", value.len()).into_bytes();
    resp_value.extend_from_slice(&value);
    resp_value.extend_from_slice(b"\r\n");
    let pieces = vec![0; ferrite_proto::VALUE_INLINE_BYTES_MAX];
    let script = Arc::new(Script { addresses, value, resp_value, direct_value_size: args.direct_value_size, pieces });

    println!(
        "ferrite-echo {} with {} shard(s): answers without storing anything",
        env!("CARGO_PKG_VERSION"),
        args.shards
    );
    for (index, (_, resp)) in shards.iter().enumerate() {
        println!("shard {index}: native {}", script.addresses[index]);
        if let Some(resp) = resp {
            println!("shard {index}: resp {}", resp.local_addr().map_err(|e| e.to_string())?);
        }
    }
    println!("ready. Stop with Ctrl-C or SIGTERM.");

    let threads: Vec<_> = shards
        .into_iter()
        .enumerate()
        .map(|(index, (native, resp))| {
            let script = Arc::clone(&script);
            std::thread::Builder::new()
                .name(format!("echo-shard-{index}"))
                .spawn(move || serve_shard(index as u16, native, resp, script))
                .map_err(|e| format!("starting shard {index}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    for thread in threads {
        match thread.join() {
            Ok(result) => result?,
            Err(_) => return Err("a shard thread panicked".into()),
        }
    }
    Ok(())
}

/// One shard: a single-threaded runtime accepting on its listeners until the process ends
/// (SIGTERM's default action: there is nothing to save).
fn serve_shard(
    index: u16,
    native: std::net::TcpListener,
    resp: Option<std::net::TcpListener>,
    script: Arc<Script>,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("shard {index}: starting its runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let native = TcpListener::from_std(native).map_err(|e| e.to_string())?;
        if let Some(resp) = resp {
            let resp = TcpListener::from_std(resp).map_err(|e| e.to_string())?;
            let script = Arc::clone(&script);
            tokio::task::spawn_local(async move {
                loop {
                    if let Ok((stream, _)) = resp.accept().await {
                        tokio::task::spawn_local(serve(stream, Arc::clone(&script), Protocol::Resp));
                    }
                }
            });
        }
        loop {
            if let Ok((stream, _)) = native.accept().await {
                tokio::task::spawn_local(serve(stream, Arc::clone(&script), Protocol::Native { shard: index }));
            }
        }
    })
}

#[derive(Debug, Clone, Copy)]
enum Protocol {
    Native { shard: u16 },
    Resp,
}

/// What to do after answering the buffered requests.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Read,
    /// The output buffer is full: write it, then answer the rest.
    Flush,
    /// The peer broke the protocol beyond answering: write what is buffered, then close.
    Close,
}

/// One connection: read whatever arrived, answer every complete request, write once.
async fn serve(mut stream: TcpStream, script: Arc<Script>, protocol: Protocol) {
    // Answers are small and latency is the point.
    let _ = stream.set_nodelay(true);
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut output = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut next = Next::Read;
    loop {
        if next == Next::Read {
            if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
                input.reserve(READ_CHUNK_BYTES);
            }
            match stream.read_buf(&mut input).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        next = match protocol {
            Protocol::Native { shard } => answer_native(&mut input, &mut output, &script, shard),
            Protocol::Resp => answer_resp(&mut input, &mut output, &script),
        };
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if next == Next::Close {
            return;
        }
    }
}

/// Answers every complete native frame in `input`.
fn answer_native(input: &mut BytesMut, output: &mut BytesMut, script: &Script, shard: u16) -> Next {
    loop {
        if output.len() >= WRITE_FLUSH_BYTES {
            return Next::Flush;
        }
        let Some(header) = Header::parse(input) else { return Next::Read };
        if header.body_len as usize > FRAME_BODY_BYTES_MAX {
            return Next::Close;
        }
        let frame_len = header.frame_len();
        if input.len() < frame_len {
            input.reserve(frame_len - input.len());
            return Next::Read;
        }
        respond_native(&header, &input[HEADER_BYTES..frame_len], script, shard, output);
        input.advance(frame_len);
    }
}

/// The echo's answer to one native request: decoded like the server decodes it, answered with
/// no work behind it.
fn respond_native(header: &Header, body: &[u8], script: &Script, shard: u16, output: &mut BytesMut) {
    let pool = PoolHandle(1);
    let message;
    let response = match Request::decode(header, body) {
        Ok(Request::Hello { .. }) => Response::Hello(HelloReply {
            version: PROTOCOL_VERSION,
            shard_index: shard,
            limits: Limits::MAX,
            shard_addresses: script.addresses.iter().map(String::as_str).collect(),
        }),
        Ok(Request::CreatePool { .. }) => Response::PoolCreated { pool, created: true },
        Ok(Request::OpenPool { .. }) => Response::PoolOpened { pool },
        Ok(Request::ClosePool { .. }) => Response::PoolClosed,
        Ok(Request::DeletePool { .. }) => Response::PoolDeleted,
        Ok(Request::ConfigurePool { .. }) => Response::PoolConfigured,
        Ok(Request::ListPools) => Response::Pools(Vec::new()),
        Ok(Request::DescribePools { .. }) => Response::PoolDescriptions(Vec::new()),
        Ok(Request::Put { .. }) => Response::Stored,
        Ok(Request::Get { .. }) => Response::Value(&script.value),
        Ok(Request::Erase { .. }) => Response::Erased,
        Ok(Request::Count { .. }) => Response::Count(0),
        Ok(Request::GetAttribute { .. }) => Response::Attribute(0),
        Ok(Request::Find { .. }) => Response::Found { keys: Vec::new(), next: None },
        Ok(Request::GetStatistics) => Response::Statistics(Vec::new()),
        Ok(Request::InvokeAdo { .. } | Request::InvokePutAdo { .. }) => Response::Invoked { buffers: Vec::new() },
        Ok(Request::Backup { .. }) => Response::BackedUp(ferrite_proto::BackupReport { lsn: 0, files: 0, bytes: 0 }),
        Ok(Request::PutDirect { length, .. }) => Response::TransferOpened { length },
        Ok(Request::GetDirect { .. }) => Response::TransferOpened { length: script.direct_value_size },
        Ok(Request::DirectWrite { .. }) => Response::Written,
        Ok(Request::DirectRead { offset, length, .. }) => {
            let take = u64::from(length).min(script.direct_value_size.saturating_sub(offset));
            Response::Value(&script.pieces[..take as usize])
        }
        Ok(Request::EndTransfer { .. }) => Response::TransferEnded,
        Ok(Request::PutOffset { .. }) => Response::Stored,
        Ok(Request::NodeInfo) => {
            let node = ferrite_proto::ClusterNode { native: script.addresses[0].clone(), ..Default::default() };
            Response::NodeInfo(ferrite_proto::NodeInfo { node, cluster_id: String::new() })
        }
        Ok(Request::ClusterMap) => {
            let shard_count = u16::try_from(script.addresses.len()).expect("at most 256 shards");
            Response::ClusterMap(ferrite_proto::ClusterMap::single_server(&script.addresses[0], shard_count))
        }
        Ok(Request::ClusterAdmin(_)) => {
            Response::Error { code: ferrite_proto::ErrorCode::InvalidArgument, message: "the echo is no cluster" }
        }
        Err(error) => {
            message = error.to_string();
            Response::Error { code: error.code(), message: &message }
        }
    };
    // An invocation's answer takes its opcode from the request.
    let request = Opcode::from_request(header.opcode).unwrap_or(Opcode::Error);
    response.encode_answer(request, header.request_id, output);
}

/// Answers every complete RESP command in `input`.
fn answer_resp(input: &mut BytesMut, output: &mut BytesMut, script: &Script) -> Next {
    loop {
        if output.len() >= WRITE_FLUSH_BYTES {
            return Next::Flush;
        }
        match parse_resp(input) {
            Parsed::Incomplete => return Next::Read,
            Parsed::Invalid(why) => {
                output.extend_from_slice(format!("-ERR Protocol error: {why}\r\n").as_bytes());
                return Next::Close;
            }
            Parsed::Command { len, name } => {
                respond_resp(&input[name], script, output);
                input.advance(len);
            }
        }
    }
}

/// One parsed RESP command: its length in the buffer, and where its name is (the echo needs
/// nothing else).
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Incomplete,
    Invalid(&'static str),
    Command { len: usize, name: std::ops::Range<usize> },
}

/// Parses one command: an array of bulk strings (what every client and redis-benchmark send) or
/// an inline command (`PING\r\n`, what a person types into telnet).
fn parse_resp(input: &[u8]) -> Parsed {
    let Some(first) = input.first() else { return Parsed::Incomplete };
    if *first != b'*' {
        let Some(end) = find_crlf(input, 0) else { return Parsed::Incomplete };
        let line = &input[..end];
        let name_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
        return Parsed::Command { len: end + 2, name: 0..name_end };
    }
    let Some((count, mut at)) = read_number(input, 1) else { return incomplete_or(input, 0, "bad array length") };
    if count == 0 || count > RESP_ARGS_MAX {
        return Parsed::Invalid("array length out of range");
    }
    let mut name = None;
    for _ in 0..count {
        match input.get(at) {
            None => return Parsed::Incomplete,
            Some(b'$') => {}
            Some(_) => return Parsed::Invalid("expected a bulk string"),
        }
        let Some((len, start)) = read_number(input, at + 1) else { return incomplete_or(input, at, "bad bulk length") };
        if len > RESP_BULK_BYTES_MAX {
            return Parsed::Invalid("bulk string too long");
        }
        if input.len() < start + len + 2 {
            return Parsed::Incomplete;
        }
        if &input[start + len..start + len + 2] != b"\r\n" {
            return Parsed::Invalid("bulk string not followed by CRLF");
        }
        name.get_or_insert(start..start + len);
        at = start + len + 2;
    }
    Parsed::Command { len: at, name: name.expect("count >= 1, so the loop ran") }
}

/// A decimal number from `at` up to CRLF, and where the next element starts; `None` if the line
/// is not complete yet or not a number.
fn read_number(input: &[u8], at: usize) -> Option<(usize, usize)> {
    let end = find_crlf(input, at)?;
    let digits = std::str::from_utf8(&input[at..end]).ok()?;
    Some((digits.parse().ok()?, end + 2))
}

/// A header line (starting at `at`) that cannot be parsed is incomplete while it has no CRLF yet,
/// invalid after.
fn incomplete_or(input: &[u8], at: usize, why: &'static str) -> Parsed {
    // The longest header line is `*` or `$` plus 20 digits.
    if find_crlf(input, at).is_none() && input.len() - at < 32 {
        Parsed::Incomplete
    } else {
        Parsed::Invalid(why)
    }
}

fn find_crlf(input: &[u8], from: usize) -> Option<usize> {
    input.get(from..)?.windows(2).position(|pair| pair == b"\r\n").map(|offset| from + offset)
}

fn respond_resp(name: &[u8], script: &Script, output: &mut BytesMut) {
    let upper = name.to_ascii_uppercase();
    match upper.as_slice() {
        b"GET" => output.extend_from_slice(&script.resp_value),
        b"PING" => output.extend_from_slice(b"+PONG\r\n"),
        b"DEL" | b"EXISTS" | b"INCR" => output.extend_from_slice(b":1\r\n"),
        // redis-benchmark asks for `save` and `appendonly` to warn about persistence: answer
        // "parameter, empty value" so it has nothing to warn about.
        b"CONFIG" => output.extend_from_slice(b"*2\r\n$0\r\n\r\n$0\r\n\r\n"),
        _ => output.extend_from_slice(b"+OK\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> Script {
        Script {
            addresses: vec!["127.0.0.1:1".into()],
            value: b"vv".to_vec(),
            resp_value: b"$2\r\nvv\r\n".to_vec(),
            direct_value_size: 3,
            pieces: vec![0; 8],
        }
    }

    #[test]
    fn resp_commands_parse_whole_or_not_at_all() {
        let set = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        for cut in 0..set.len() {
            assert_eq!(parse_resp(&set[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        assert_eq!(parse_resp(set), Parsed::Command { len: set.len(), name: 8..11 });
        assert_eq!(parse_resp(b"PING\r\nrest"), Parsed::Command { len: 6, name: 0..4 });
        assert_eq!(parse_resp(b"*1\r\n+PING\r\n"), Parsed::Invalid("expected a bulk string"));
        assert_eq!(parse_resp(b"*x\r\n"), Parsed::Invalid("bad array length"));
        assert_eq!(parse_resp(b"*0\r\n"), Parsed::Invalid("array length out of range"));
    }

    /// Pipelined commands are all answered, in order, with one buffer.
    #[test]
    fn resp_answers_every_buffered_command() {
        let mut input = BytesMut::from(
            &b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING"[..],
        );
        let mut output = BytesMut::new();
        assert_eq!(answer_resp(&mut input, &mut output, &script()), Next::Read);
        assert_eq!(&output[..], b"$2\r\nvv\r\n+OK\r\n");
        assert_eq!(&input[..], b"*1\r\n$4\r\nPING", "the incomplete command waits for more bytes");
    }

    /// The native answers decode as the replies a client expects, with the request's id.
    #[test]
    fn native_requests_get_well_formed_answers() {
        let script = script();
        let requests = [
            Request::Hello { version: PROTOCOL_VERSION, client_name: "t", auth: b"" },
            Request::Put { pool: PoolHandle(1), flags: ferrite_proto::PutFlags::NONE, key: b"k", value: b"v" },
            Request::Get { pool: PoolHandle(1), key: b"k" },
        ];
        let mut input = BytesMut::new();
        for (id, request) in requests.iter().enumerate() {
            request.encode(id as u64 + 7, &mut input);
        }
        let mut output = BytesMut::new();
        assert_eq!(answer_native(&mut input, &mut output, &script, 0), Next::Read);
        assert!(input.is_empty());
        let mut answers = Vec::new();
        let mut at = 0;
        while at < output.len() {
            let header = Header::parse(&output[at..]).expect("a whole header");
            let body = &output[at + HEADER_BYTES..at + header.frame_len()];
            let response = Response::decode(&header, body).expect("a valid response");
            answers.push((header.request_id, format!("{response:?}")));
            at += header.frame_len();
        }
        assert_eq!(answers.len(), 3);
        assert_eq!(answers[0].0, 7);
        assert!(answers[0].1.starts_with("Hello(HelloReply { version: 3, shard_index: 0"), "{answers:?}");
        assert_eq!(answers[1], (8, "Stored".to_owned()));
        assert_eq!(answers[2], (9, "Value([118, 118])".to_owned()));
    }
}
