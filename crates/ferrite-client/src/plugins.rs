//! Typed helpers for the shipped plugins: each builds the plugin's text payload, invokes it
//! through [`Pool::invoke`] and parses its answer, so callers deal in numbers rather than text.
//!
//! ```no_run
//! use ferrite_client::plugins::{Counter, Tabulator};
//! use ferrite_client::{PoolOptions, Session};
//!
//! # async fn example() -> ferrite_client::Result<()> {
//! let session = Session::connect("127.0.0.1:11911").await?;
//! // The pool's chain is fixed when it is created: here a counter and a tabulator would both
//! // see every payload, so each gets a pool of its own.
//! let counters = session.open_pool("counters").await?;
//! assert_eq!(Counter::add(&counters, b"hits", 5).await?, 5);
//! assert_eq!(Counter::compare_and_swap(&counters, b"hits", 5, 9).await?, Ok(9));
//! assert_eq!(Counter::compare_and_swap(&counters, b"hits", 5, 1).await?, Err(9));
//!
//! let latencies = session.open_pool("latencies").await?;
//! let stats = Tabulator::add(&latencies, b"get", &[1.5, 2.5]).await?;
//! assert_eq!((stats.count, stats.mean), (2, 2.0));
//! # Ok(())
//! # }
//! ```
//!
//! [`blocking`] has the same helpers over [`crate::blocking::Pool`]. Every helper creates an
//! absent key on demand with the plugin's value size, so a new key starts empty (a counter at 0,
//! a tabulator with no samples). Each reads the one answer buffer of the pool's chain; a chain
//! that answers with more or fewer (two answering plugins on one pool) is an
//! [`Error::UnexpectedResponse`]. A plugin's refusal (a value of the wrong size, an overflow)
//! comes back as the server's `ado_failed` error carrying the plugin's message
//! ([`Error::is_ado_failed`]), and changes nothing.
//!
//! A `get` is not sent read-only: it may have to create the key, which is a write.

use std::fmt::Write as _;

use crate::error::{Error, Result};
use crate::pool::{InvokeOptions, InvokeResponse, Pool};

/// The `counter` plugin's value: an `i64`, 8 bytes little-endian.
const COUNTER_VALUE_BYTES: u64 = 8;

/// The `tabulator` plugin's value: count, min, max and sum, 8 bytes each.
const TABULATOR_VALUE_BYTES: u64 = 32;

/// The `counter` plugin's operations (see `docs/plugins.md`, "Shipped plugins"), on the pool's
/// async API. A namespace: it has no values.
#[derive(Debug)]
pub enum Counter {}

impl Counter {
    /// Adds `n` (may be negative) and returns the new value. An overflow is refused.
    pub async fn add(pool: &Pool, key: &[u8], n: i64) -> Result<i64> {
        counter_add(n).run(pool, key).await
    }

    /// The counter's value.
    pub async fn get(pool: &Pool, key: &[u8]) -> Result<i64> {
        counter_get().run(pool, key).await
    }

    /// Sets `new` if the value is `old`: `Ok(new)` when it was swapped, `Err(current)` when the
    /// value was something else and nothing changed (so the caller can retry from `current`).
    pub async fn compare_and_swap(pool: &Pool, key: &[u8], old: i64, new: i64) -> Result<Result<i64, i64>> {
        counter_cas(old, new).run(pool, key).await
    }
}

/// The `tabulator` plugin's operations (see `docs/plugins.md`, "Shipped plugins"), on the
/// pool's async API. A namespace: it has no values.
#[derive(Debug)]
pub enum Tabulator {}

impl Tabulator {
    /// Adds the samples, all or none, and returns the statistics after them. Samples must be
    /// finite and there must be at least one; otherwise nothing is sent
    /// ([`Error::InvalidArgument`]).
    pub async fn add(pool: &Pool, key: &[u8], samples: &[f64]) -> Result<Stats> {
        tabulator_add(samples)?.run(pool, key).await
    }

    /// The statistics of the samples added so far.
    pub async fn get(pool: &Pool, key: &[u8]) -> Result<Stats> {
        tabulator_get().run(pool, key).await
    }

    /// Forgets every sample.
    pub async fn reset(pool: &Pool, key: &[u8]) -> Result<()> {
        tabulator_reset().run(pool, key).await
    }
}

/// The `filter` plugin (see `docs/plugins.md`, "Shipped plugins"), on the pool's async API.
#[derive(Debug)]
pub enum Filter {}

impl Filter {
    /// The keys of the pool whose values satisfy `predicate` (`contains BYTES`,
    /// `starts-with BYTES`, `u64-at-least N`), found next to the data: only they cross the
    /// network.
    pub async fn keys(pool: &Pool, predicate: &[u8]) -> Result<Vec<Vec<u8>>> {
        let responses = pool.invoke_pool(predicate, InvokeOptions::default()).await?;
        Ok(filter_keys(&responses))
    }
}

/// The `versioning` plugin (see `docs/plugins.md`, "Shipped plugins"), on the pool's async API:
/// the last versions of a value, kept inside it.
#[derive(Debug)]
pub enum Versioning {}

impl Versioning {
    /// Stores `data` as the key's newest version and returns its number (from 1). An absent key
    /// is created with `value_bytes` (`32 + versions × (4 + largest version)`), which fixes how
    /// much one version may hold.
    pub async fn put(pool: &Pool, key: &[u8], data: &[u8], value_bytes: u64) -> Result<u64> {
        let options = InvokeOptions { create_size: Some(value_bytes), ..InvokeOptions::default() };
        let responses = pool.invoke(key, &versioning_put_payload(data), options).await?;
        parse_version_number(&responses)
    }

    /// Version `version` of the key (the newest with `None`), if it is still kept.
    pub async fn get(pool: &Pool, key: &[u8], version: Option<u64>) -> Result<Vec<u8>> {
        let responses = pool.invoke(key, versioning_get_payload(version).as_bytes(), read_only()).await?;
        one_buffer("versioning", &responses).map(<[u8]>::to_vec)
    }

    /// The versions kept, oldest first: (number, length).
    pub async fn list(pool: &Pool, key: &[u8]) -> Result<Vec<(u64, usize)>> {
        let responses = pool.invoke(key, b"list", read_only()).await?;
        parse_version_list(&responses)
    }
}

/// Statistics of a tabulator's samples, as its answer gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub count: u64,
    /// The smallest sample; 0 when `count` is 0 (the plugin answers `-`).
    pub min: f64,
    /// The largest sample; 0 when `count` is 0.
    pub max: f64,
    /// The mean of the samples (the plugin's `f64`: its answer text reads back exactly); 0 when
    /// `count` is 0.
    pub mean: f64,
}

/// The same helpers over the blocking pool.
pub mod blocking {
    use super::{
        counter_add, counter_cas, counter_get, filter_keys, one_buffer, parse_version_list, parse_version_number,
        read_only, tabulator_add, tabulator_get, tabulator_reset, versioning_get_payload, versioning_put_payload,
        InvokeOptions, Result, Stats,
    };
    use crate::blocking::Pool;

    /// [`super::Counter`] over [`crate::blocking::Pool`].
    #[derive(Debug)]
    pub enum Counter {}

    impl Counter {
        pub fn add(pool: &Pool, key: &[u8], n: i64) -> Result<i64> {
            counter_add(n).run_blocking(pool, key)
        }

        pub fn get(pool: &Pool, key: &[u8]) -> Result<i64> {
            counter_get().run_blocking(pool, key)
        }

        pub fn compare_and_swap(pool: &Pool, key: &[u8], old: i64, new: i64) -> Result<Result<i64, i64>> {
            counter_cas(old, new).run_blocking(pool, key)
        }
    }

    /// [`super::Tabulator`] over [`crate::blocking::Pool`].
    #[derive(Debug)]
    pub enum Tabulator {}

    impl Tabulator {
        pub fn add(pool: &Pool, key: &[u8], samples: &[f64]) -> Result<Stats> {
            tabulator_add(samples)?.run_blocking(pool, key)
        }

        pub fn get(pool: &Pool, key: &[u8]) -> Result<Stats> {
            tabulator_get().run_blocking(pool, key)
        }

        pub fn reset(pool: &Pool, key: &[u8]) -> Result<()> {
            tabulator_reset().run_blocking(pool, key)
        }
    }

    /// [`super::Filter`] over [`crate::blocking::Pool`].
    #[derive(Debug)]
    pub enum Filter {}

    impl Filter {
        pub fn keys(pool: &Pool, predicate: &[u8]) -> Result<Vec<Vec<u8>>> {
            let responses = pool.invoke_pool(predicate, InvokeOptions::default())?;
            Ok(filter_keys(&responses))
        }
    }

    /// [`super::Versioning`] over [`crate::blocking::Pool`].
    #[derive(Debug)]
    pub enum Versioning {}

    impl Versioning {
        pub fn put(pool: &Pool, key: &[u8], data: &[u8], value_bytes: u64) -> Result<u64> {
            let options = InvokeOptions { create_size: Some(value_bytes), ..InvokeOptions::default() };
            parse_version_number(&pool.invoke(key, &versioning_put_payload(data), options)?)
        }

        pub fn get(pool: &Pool, key: &[u8], version: Option<u64>) -> Result<Vec<u8>> {
            let responses = pool.invoke(key, versioning_get_payload(version).as_bytes(), read_only())?;
            one_buffer("versioning", &responses).map(<[u8]>::to_vec)
        }

        pub fn list(pool: &Pool, key: &[u8]) -> Result<Vec<(u64, usize)>> {
            parse_version_list(&pool.invoke(key, b"list", read_only())?)
        }
    }
}

/// One request to a plugin: what to send and how to read the answer. Built once for both the
/// async and the blocking helpers, which differ only in how they wait.
struct Request<T> {
    plugin: &'static str,
    payload: String,
    value_bytes: u64,
    parse: fn(&str) -> Result<T>,
}

impl<T> Request<T> {
    fn options(&self) -> InvokeOptions {
        InvokeOptions { create_size: Some(self.value_bytes), ..InvokeOptions::default() }
    }

    async fn run(self, pool: &Pool, key: &[u8]) -> Result<T> {
        let responses = pool.invoke(key, self.payload.as_bytes(), self.options()).await?;
        self.answer(&responses)
    }

    fn run_blocking(self, pool: &crate::blocking::Pool, key: &[u8]) -> Result<T> {
        let responses = pool.invoke(key, self.payload.as_bytes(), self.options())?;
        self.answer(&responses)
    }

    fn answer(&self, responses: &[InvokeResponse]) -> Result<T> {
        let [response] = responses else {
            return Err(Error::UnexpectedResponse(format!(
                "{} answered {} buffers, not one (does the pool's chain hold another answering plugin?)",
                self.plugin,
                responses.len()
            )));
        };
        let text = std::str::from_utf8(&response.data)
            .map_err(|_| Error::UnexpectedResponse(format!("{} answered with bytes that are not text", self.plugin)))?;
        (self.parse)(text)
    }
}

fn counter_request<T>(payload: String, parse: fn(&str) -> Result<T>) -> Request<T> {
    Request { plugin: "counter", payload, value_bytes: COUNTER_VALUE_BYTES, parse }
}

fn counter_add(n: i64) -> Request<i64> {
    counter_request(format!("add {n}"), parse_counter_value)
}

fn counter_get() -> Request<i64> {
    counter_request("get".to_owned(), parse_counter_value)
}

fn counter_cas(old: i64, new: i64) -> Request<Result<i64, i64>> {
    counter_request(format!("cas {old} {new}"), parse_counter_cas)
}

fn tabulator_request<T>(payload: String, parse: fn(&str) -> Result<T>) -> Request<T> {
    Request { plugin: "tabulator", payload, value_bytes: TABULATOR_VALUE_BYTES, parse }
}

fn tabulator_add(samples: &[f64]) -> Result<Request<Stats>> {
    if samples.is_empty() {
        return Err(Error::InvalidArgument("a tabulator add needs at least one sample".to_owned()));
    }
    let mut payload = String::from("add");
    for sample in samples {
        if !sample.is_finite() {
            return Err(Error::InvalidArgument(format!("the tabulator takes finite samples, not {sample}")));
        }
        // `{:?}` is the shortest text that reads back as the same f64, with an exponent for very
        // large or small numbers, where `{}` would write out hundreds of digits.
        write!(payload, " {sample:?}").expect("writing to a String cannot fail");
    }
    Ok(tabulator_request(payload, parse_stats))
}

fn tabulator_get() -> Request<Stats> {
    tabulator_request("get".to_owned(), parse_stats)
}

fn tabulator_reset() -> Request<()> {
    tabulator_request("reset".to_owned(), parse_reset)
}

/// The keys of a `filter` answer: one buffer each.
fn filter_keys(responses: &[InvokeResponse]) -> Vec<Vec<u8>> {
    responses.iter().map(|response| response.data.to_vec()).collect()
}

/// Reading calls hold a read lock, so other readers of the key go on.
fn read_only() -> InvokeOptions {
    InvokeOptions { read_only: true, ..InvokeOptions::default() }
}

fn versioning_put_payload(data: &[u8]) -> Vec<u8> {
    let mut payload = b"put ".to_vec();
    payload.extend_from_slice(data);
    payload
}

fn versioning_get_payload(version: Option<u64>) -> String {
    version.map_or_else(|| "get".to_owned(), |version| format!("get {version}"))
}

/// The one answer buffer of a plugin that answers one.
fn one_buffer<'r>(plugin: &str, responses: &'r [InvokeResponse]) -> Result<&'r [u8]> {
    match responses {
        [response] => Ok(&response.data),
        _ => Err(Error::UnexpectedResponse(format!("{plugin} answered {} buffers, not one", responses.len()))),
    }
}

fn parse_version_number(responses: &[InvokeResponse]) -> Result<u64> {
    let answer = one_buffer("versioning", responses)?;
    std::str::from_utf8(answer)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| unexpected("versioning", &String::from_utf8_lossy(answer), "a version number"))
}

fn parse_version_list(responses: &[InvokeResponse]) -> Result<Vec<(u64, usize)>> {
    let answer = one_buffer("versioning", responses)?;
    let text = String::from_utf8_lossy(answer);
    text.lines()
        .map(|line| {
            let (number, len) = line.split_once(' ').ok_or_else(|| unexpected("versioning", line, "`N LEN`"))?;
            match (number.parse(), len.parse()) {
                (Ok(number), Ok(len)) => Ok((number, len)),
                _ => Err(unexpected("versioning", line, "`N LEN`")),
            }
        })
        .collect()
}

fn unexpected(plugin: &str, text: &str, expected: &str) -> Error {
    Error::UnexpectedResponse(format!("{plugin} answered {text:?}, not {expected}"))
}

/// `add` and `get` answer the value as decimal text.
fn parse_counter_value(text: &str) -> Result<i64> {
    text.parse().map_err(|_| unexpected("counter", text, "a 64-bit integer"))
}

/// `cas` answers the new value bare when it swapped, `mismatch CURRENT` when it did not.
fn parse_counter_cas(text: &str) -> Result<Result<i64, i64>> {
    match text.strip_prefix("mismatch ") {
        Some(current) => Ok(Err(current.parse().map_err(|_| unexpected("counter", text, "`mismatch CURRENT`"))?)),
        None => Ok(Ok(parse_counter_value(text)?)),
    }
}

/// `count=N min=A max=B mean=C`, with `-` for A, B and C when N is 0.
fn parse_stats(text: &str) -> Result<Stats> {
    const FORM: &str = "`count=N min=A max=B mean=C`";
    let bad = || unexpected("tabulator", text, FORM);
    let mut words = text.split_ascii_whitespace();
    let mut field = |name: &str| words.next().and_then(|word| word.strip_prefix(name)).ok_or_else(bad);
    let count = field("count=")?;
    let (min, max, mean) = (field("min=")?, field("max=")?, field("mean=")?);
    if words.next().is_some() {
        return Err(bad());
    }
    let count: u64 = count.parse().map_err(|_| bad())?;
    if count == 0 {
        return if [min, max, mean] == ["-"; 3] {
            Ok(Stats { count, min: 0.0, max: 0.0, mean: 0.0 })
        } else {
            Err(bad())
        };
    }
    let number = |word: &str| word.parse::<f64>().ok().filter(|number| number.is_finite()).ok_or_else(bad);
    Ok(Stats { count, min: number(min)?, max: number(max)?, mean: number(mean)? })
}

/// `reset` answers the emptied statistics.
fn parse_reset(text: &str) -> Result<()> {
    match parse_stats(text)? {
        Stats { count: 0, .. } => Ok(()),
        _ => Err(unexpected("tabulator", text, "a count of 0 after a reset")),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::fake_server::{serve_memory_shard, FakeShard};
    use crate::{PoolOptions, Session};

    fn response(text: &'static str) -> InvokeResponse {
        InvokeResponse { layer: 0, data: Bytes::from_static(text.as_bytes()) }
    }

    fn is_unexpected<T: std::fmt::Debug>(result: Result<T>) -> bool {
        matches!(result, Err(Error::UnexpectedResponse(_)))
    }

    /// Counter answers: a value, a swap, a mismatch; anything else is an unexpected response.
    #[test]
    fn parses_counter_answers() {
        assert_eq!(parse_counter_value("-42").expect("a value"), -42);
        assert_eq!(parse_counter_cas("9").expect("swapped"), Ok(9));
        assert_eq!(parse_counter_cas("mismatch -3").expect("mismatch"), Err(-3));
        for text in ["", "4.5", "counter: overflow", "99999999999999999999"] {
            assert!(is_unexpected(parse_counter_value(text)), "{text:?}");
        }
        for text in ["mismatch", "mismatch x", "mismatch 1 2", "swapped"] {
            assert!(is_unexpected(parse_counter_cas(text)), "{text:?}");
        }
    }

    /// Tabulator answers: full statistics (exponents included), the empty tally with `-`, and
    /// malformed ones refused.
    #[test]
    fn parses_tabulator_answers() {
        assert_eq!(
            parse_stats("count=3 min=-2.0 max=1e300 mean=3.5").expect("stats"),
            Stats { count: 3, min: -2.0, max: 1e300, mean: 3.5 }
        );
        assert_eq!(
            parse_stats("count=0 min=- max=- mean=-").expect("empty"),
            Stats { count: 0, min: 0.0, max: 0.0, mean: 0.0 }
        );
        for text in [
            "",
            "count=1 min=1.0 max=1.0",
            "count=1 min=1.0 max=1.0 mean=1.0 extra",
            "count=1 max=1.0 min=1.0 mean=1.0",
            "count=-1 min=1.0 max=1.0 mean=1.0",
            "count=1 min=- max=- mean=-",
            "count=0 min=0.0 max=0.0 mean=0.0",
            "count=1 min=1.0 max=1.0 mean=NaN",
            "count=1 min=1.0 max=inf mean=1.0",
        ] {
            assert!(is_unexpected(parse_stats(text)), "{text:?}");
        }
        assert_eq!(parse_reset("count=0 min=- max=- mean=-").expect("reset"), ());
        assert!(is_unexpected(parse_reset("count=1 min=1.0 max=1.0 mean=1.0")));
    }

    /// Payloads are the plugins' text forms; samples round-trip exactly, and bad ones are refused
    /// before anything is sent.
    #[test]
    fn builds_payloads() {
        assert_eq!(counter_add(-5).payload, "add -5");
        assert_eq!(counter_cas(1, 2).payload, "cas 1 2");
        assert_eq!(counter_get().options().create_size, Some(8));
        let add = tabulator_add(&[1.0, -0.1, 1e-300, f64::MAX]).expect("finite samples");
        assert_eq!(add.payload, "add 1.0 -0.1 1e-300 1.7976931348623157e308");
        assert_eq!(add.options().create_size, Some(32));
        let read: Vec<f64> = add.payload.split(' ').skip(1).map(|word| word.parse().expect("parses")).collect();
        assert_eq!(read, [1.0, -0.1, 1e-300, f64::MAX]);
        for samples in [&[][..], &[1.0, f64::NAN], &[f64::INFINITY]] {
            assert!(matches!(tabulator_add(samples).err(), Some(Error::InvalidArgument(_))), "{samples:?}");
        }
    }

    /// An answer must be one text buffer: none, two, or bytes that are not text are unexpected.
    #[test]
    fn takes_exactly_one_text_buffer() {
        let get = counter_get();
        assert_eq!(get.answer(&[response("7")]).expect("one buffer"), 7);
        assert!(is_unexpected(get.answer(&[])));
        assert!(is_unexpected(get.answer(&[response("7"), response("7")])));
        let binary = InvokeResponse { layer: 0, data: Bytes::from_static(b"\xff") };
        assert!(is_unexpected(get.answer(&[binary])));
    }

    /// Proves, through the fake shard (whose stand-in plugin echoes the payload), that the
    /// helpers send the plugin's payload with create-on-demand at its value size, and that an
    /// answer they cannot read is an unexpected response, not a wrong number.
    #[tokio::test]
    async fn helpers_invoke_with_the_plugins_payload_and_value_size() {
        let shard = FakeShard::bind().await;
        let addresses = vec![shard.address()];
        let address = addresses[0].clone();
        let server = tokio::spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });
        let session = Session::connect(&address).await.expect("connect");
        let pool = session.create_pool("ado", PoolOptions::default()).await.expect("create");

        let echoed = Counter::add(&pool, b"c", 5).await.expect_err("the echo is not a number");
        assert!(matches!(&echoed, Error::UnexpectedResponse(text) if text.contains("\"add 5\"")), "{echoed}");
        assert_eq!(pool.get(b"c").await.expect("created"), [0; 8]);
        let echoed = Tabulator::add(&pool, b"t", &[0.5, 2.0]).await.expect_err("the echo is not statistics");
        assert!(matches!(&echoed, Error::UnexpectedResponse(text) if text.contains("\"add 0.5 2.0\"")), "{echoed}");
        assert_eq!(pool.get(b"t").await.expect("created"), [0; 32]);

        drop((pool, session));
        server.await.expect("fake server");
    }

    /// The blocking helpers run the same requests, on the blocking pool.
    #[test]
    fn blocking_helpers_invoke_like_the_async_ones() {
        let server_runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("server runtime");
        let shard = server_runtime.block_on(FakeShard::bind());
        let addresses = vec![shard.address()];
        let address = addresses[0].clone();
        let server = server_runtime.spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });

        let session = crate::blocking::Session::connect(&address).expect("connect");
        let pool = session.create_pool("ado", PoolOptions::default()).expect("create");
        let echoed = blocking::Counter::compare_and_swap(&pool, b"c", 1, 2).expect_err("the echo is no answer");
        assert!(matches!(&echoed, Error::UnexpectedResponse(text) if text.contains("\"cas 1 2\"")), "{echoed}");
        assert_eq!(pool.get(b"c").expect("created"), [0; 8]);
        let echoed = blocking::Tabulator::reset(&pool, b"t").expect_err("the echo is no answer");
        assert!(matches!(&echoed, Error::UnexpectedResponse(text) if text.contains("\"reset\"")), "{echoed}");
        assert_eq!(pool.get(b"t").expect("created"), [0; 32]);
        pool.close().expect("close");
        drop(session);
        server_runtime.block_on(server).expect("fake server");
    }

    #[test]
    fn versioning_answers_parse() {
        let buffer = |data: &[u8]| InvokeResponse { layer: 0, data: bytes::Bytes::copy_from_slice(data) };
        assert_eq!(parse_version_number(&[buffer(b"12")]).expect("a number"), 12);
        assert!(parse_version_number(&[buffer(b"twelve")]).is_err());
        assert_eq!(parse_version_list(&[buffer(b"3 10\n4 0")]).expect("a list"), vec![(3, 10), (4, 0)]);
        assert_eq!(parse_version_list(&[buffer(b"")]).expect("no versions"), vec![]);
        assert!(parse_version_list(&[buffer(b"3")]).is_err());
        assert_eq!(versioning_put_payload(b"a b"), b"put a b");
        assert_eq!(versioning_get_payload(Some(7)), "get 7");
        assert_eq!(filter_keys(&[buffer(b"k\n1"), buffer(b"k2")]), vec![b"k\n1".to_vec(), b"k2".to_vec()]);
    }
}
