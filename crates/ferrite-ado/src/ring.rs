//! A single-producer single-consumer ring of variable-length messages in shared memory.
//!
//! The shard and its host share one memfd holding two rings (shard to host, host to shard).
//! Each side keeps its own position privately and only *reads* the other side's position from
//! shared memory, so a buggy or dead peer can make the ring look corrupt but never make this
//! side read or write outside it: every position and length read from shared memory is checked
//! before use, and a corrupt ring is an error, never a panic.
//!
//! Layout of one ring (all integers little-endian on the only platform we run, native order):
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! |      0 |    8 | magic `RING_MAGIC`                                           |
//! |      8 |    8 | capacity of the data area in bytes (a power of two)          |
//! |     64 |    8 | tail: bytes ever published by the producer (atomic)          |
//! |    128 |    8 | head: bytes ever consumed by the consumer (atomic)           |
//! |    136 |    4 | consumer sleeping: 1 while the consumer waits for a wake-up  |
//! |    192 |  cap | data: records                                                |
//!
//! Tail and head sit on their own cache lines so the two sides do not fight over one line.
//! A record is an 8-byte header (`len: u32`, `!len: u32`) followed by `len` bytes padded to 8;
//! as the capacity is a multiple of 8, a header never straddles the end, while a payload may
//! wrap around and is copied in two pieces.
//!
//! Ordering: the producer copies a record in, then stores the tail with Release; the consumer
//! loads the tail with Acquire before copying records out, and stores the head with Release
//! after, which the producer loads with Acquire before reusing the space.
//!
//! Wake-ups: a consumer about to sleep sets "sleeping" and then looks at the ring once more;
//! a producer publishes and then swaps "sleeping" to 0, signalling the eventfd only if it was 1.
//! Both sides put a SeqCst fence between their store and their load, so either the consumer
//! sees the new record or the producer sees it sleeping: a wake-up is never lost, and a
//! producer that writes a batch while the consumer is busy signals nothing at all.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::shm::Mapping;

/// `b"FRRING01"` as a little-endian integer.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"FRRING01");
/// Bytes before a ring's data area.
pub const RING_HEADER_BYTES: usize = 192;
/// Bytes before each record's payload.
pub const RECORD_HEADER_BYTES: usize = 8;
/// The smallest data area a ring may have.
pub const RING_CAPACITY_MIN_BYTES: usize = 4096;

const MAGIC_OFFSET: usize = 0;
const CAPACITY_OFFSET: usize = 8;
const TAIL_OFFSET: usize = 64;
const HEAD_OFFSET: usize = 128;
const SLEEPING_OFFSET: usize = 136;

const _: () = assert!(SLEEPING_OFFSET + 4 <= RING_HEADER_BYTES);
const _: () = assert!(RING_HEADER_BYTES.is_multiple_of(64));

/// Why a ring operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// Not enough free space now; the consumer has not caught up. Retry later.
    #[error("ring is full")]
    Full,
    /// The message can never fit in this ring.
    #[error("message of {len} bytes exceeds the ring's limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The shared header or a record is inconsistent: the peer is buggy or died mid-write.
    #[error("ring is corrupt: {0}")]
    Corrupt(&'static str),
}

/// Where a ring lives: a mapping and the offset of its header.
#[derive(Debug, Clone)]
struct RingMemory {
    mapping: Arc<Mapping>,
    offset: usize,
    capacity: usize,
}

impl RingMemory {
    /// Checks that a ring of `capacity` fits at `offset` and its header is aligned.
    fn new(mapping: Arc<Mapping>, offset: usize, capacity: usize) -> Result<RingMemory, RingError> {
        if !capacity.is_power_of_two() || capacity < RING_CAPACITY_MIN_BYTES {
            return Err(RingError::Corrupt("capacity is not a power of two of at least 4 KiB"));
        }
        if !offset.is_multiple_of(64)
            || offset.checked_add(RING_HEADER_BYTES + capacity).is_none_or(|end| end > mapping.len())
        {
            return Err(RingError::Corrupt("ring does not fit in its mapping"));
        }
        Ok(RingMemory { mapping, offset, capacity })
    }

    fn atomic_u64(&self, field: usize) -> &AtomicU64 {
        self.mapping.atomic_u64(self.offset + field).expect("ring header checked in bounds and aligned at construction")
    }

    fn sleeping(&self) -> &AtomicU32 {
        self.mapping
            .atomic_u32(self.offset + SLEEPING_OFFSET)
            .expect("ring header checked in bounds and aligned at construction")
    }

    fn data_offset(&self, position: u64) -> u64 {
        (self.offset + RING_HEADER_BYTES) as u64 + (position & (self.capacity as u64 - 1))
    }

    /// Copies `bytes` into the data area at `position`, wrapping at the end.
    fn copy_in(&self, position: u64, bytes: &[u8]) {
        let start = (position & (self.capacity as u64 - 1)) as usize;
        let first = bytes.len().min(self.capacity - start);
        let wrote_first = self.mapping.write(self.data_offset(position), &bytes[..first]);
        let wrote_rest = self.mapping.write(self.data_offset(0), &bytes[first..]);
        debug_assert!(wrote_first && wrote_rest, "ring data area checked at construction");
    }

    /// Copies `out.len()` bytes out of the data area at `position`, wrapping at the end.
    fn copy_out(&self, position: u64, out: &mut [u8]) {
        let start = (position & (self.capacity as u64 - 1)) as usize;
        let first = out.len().min(self.capacity - start);
        let (head, rest) = out.split_at_mut(first);
        let read_first = self.mapping.read(self.data_offset(position), head);
        let read_rest = self.mapping.read(self.data_offset(0), rest);
        debug_assert!(read_first && read_rest, "ring data area checked at construction");
    }
}

/// The total bytes a ring with a data area of `capacity` bytes occupies.
pub const fn ring_bytes(capacity: usize) -> usize {
    RING_HEADER_BYTES + capacity
}

/// Writes a fresh, empty ring header at `offset` (only while no peer uses the ring).
pub fn init_ring(mapping: &Arc<Mapping>, offset: usize, capacity: usize) -> Result<(), RingError> {
    let memory = RingMemory::new(mapping.clone(), offset, capacity)?;
    memory.atomic_u64(MAGIC_OFFSET).store(RING_MAGIC, Ordering::Relaxed);
    memory.atomic_u64(CAPACITY_OFFSET).store(capacity as u64, Ordering::Relaxed);
    memory.atomic_u64(TAIL_OFFSET).store(0, Ordering::Relaxed);
    memory.atomic_u64(HEAD_OFFSET).store(0, Ordering::Relaxed);
    memory.sleeping().store(0, Ordering::Release);
    Ok(())
}

/// Opens the ring at `offset`, checking the header a peer initialised.
fn open_ring(mapping: Arc<Mapping>, offset: usize) -> Result<(RingMemory, u64, u64), RingError> {
    let probe = RingMemory::new(mapping.clone(), offset, RING_CAPACITY_MIN_BYTES)?;
    if probe.atomic_u64(MAGIC_OFFSET).load(Ordering::Acquire) != RING_MAGIC {
        return Err(RingError::Corrupt("bad magic"));
    }
    let capacity = usize::try_from(probe.atomic_u64(CAPACITY_OFFSET).load(Ordering::Relaxed))
        .map_err(|_| RingError::Corrupt("capacity out of range"))?;
    let memory = RingMemory::new(mapping, offset, capacity)?;
    let tail = memory.atomic_u64(TAIL_OFFSET).load(Ordering::Acquire);
    let head = memory.atomic_u64(HEAD_OFFSET).load(Ordering::Acquire);
    Ok((memory, head, tail))
}

fn padded(len: usize) -> usize {
    RECORD_HEADER_BYTES + len.div_ceil(8) * 8
}

/// The writing end of a ring.
#[derive(Debug)]
pub struct Producer {
    memory: RingMemory,
    /// Our own tail: never re-read from shared memory, so the consumer cannot corrupt it.
    tail: u64,
}

impl Producer {
    pub fn open(mapping: Arc<Mapping>, offset: usize) -> Result<Producer, RingError> {
        let (memory, _, tail) = open_ring(mapping, offset)?;
        Ok(Producer { memory, tail })
    }

    /// The largest message this ring can ever carry.
    pub fn max_message_bytes(&self) -> usize {
        self.memory.capacity - RECORD_HEADER_BYTES
    }

    /// Bytes the consumer has not taken yet, checked against what a ring can hold.
    fn used(&self) -> Result<u64, RingError> {
        let head = self.memory.atomic_u64(HEAD_OFFSET).load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.memory.capacity as u64 || !used.is_multiple_of(8) {
            return Err(RingError::Corrupt("head is not behind tail"));
        }
        Ok(used)
    }

    /// Appends one message and publishes it at once. Err(Full) if it does not fit now.
    pub fn push(&mut self, message: &[u8]) -> Result<(), RingError> {
        let max = self.max_message_bytes();
        if message.len() > max || u32::try_from(message.len()).is_err() {
            return Err(RingError::TooLarge { len: message.len(), max });
        }
        let record = padded(message.len());
        if self.used()? + record as u64 > self.memory.capacity as u64 {
            return Err(RingError::Full);
        }
        let len = message.len() as u32;
        let mut header = [0u8; RECORD_HEADER_BYTES];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&(!len).to_le_bytes());
        self.memory.copy_in(self.tail, &header);
        self.memory.copy_in(self.tail + RECORD_HEADER_BYTES as u64, message);
        self.tail += record as u64;
        self.memory.atomic_u64(TAIL_OFFSET).store(self.tail, Ordering::Release);
        Ok(())
    }

    /// After publishing: true if the consumer was asleep and must be signalled (exactly one
    /// producer call sees true per sleep).
    pub fn consumer_needs_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        self.memory.sleeping().swap(0, Ordering::SeqCst) != 0
    }
}

/// The messages of one [`Consumer::drain`], back to back in one buffer that the next drain
/// reuses: a steady stream of messages allocates nothing once the buffer has grown. It never
/// grows past the ring's capacity, as a drain takes only published records.
#[derive(Debug, Default)]
pub struct Drained {
    bytes: Vec<u8>,
    /// Where each message ends in `bytes`, in ring order.
    ends: Vec<usize>,
}

impl Drained {
    pub fn new() -> Drained {
        Drained::default()
    }

    /// How many messages the drain took.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The messages, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(start, end)| &self.bytes[start..end])
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Room for one more message of `len` bytes, to be filled by the caller.
    fn append(&mut self, len: usize) -> &mut [u8] {
        let start = self.bytes.len();
        self.bytes.resize(start + len, 0);
        self.ends.push(self.bytes.len());
        &mut self.bytes[start..]
    }
}

/// The reading end of a ring.
#[derive(Debug)]
pub struct Consumer {
    memory: RingMemory,
    /// Our own head: never re-read from shared memory.
    head: u64,
}

impl Consumer {
    pub fn open(mapping: Arc<Mapping>, offset: usize) -> Result<Consumer, RingError> {
        let (memory, head, _) = open_ring(mapping, offset)?;
        Ok(Consumer { memory, head })
    }

    /// Bytes published and not yet consumed, checked against what a ring can hold.
    fn available(&self) -> Result<u64, RingError> {
        let tail = self.memory.atomic_u64(TAIL_OFFSET).load(Ordering::Acquire);
        let available = tail.wrapping_sub(self.head);
        if available > self.memory.capacity as u64 || !available.is_multiple_of(8) {
            return Err(RingError::Corrupt("tail is not ahead of head"));
        }
        Ok(available)
    }

    pub fn is_empty(&self) -> Result<bool, RingError> {
        Ok(self.available()? == 0)
    }

    /// Takes every message published so far into `out` (replacing what it held) and frees their
    /// space with one head update. Returns how many were taken. On an error nothing is taken and
    /// `out` is left empty.
    pub fn drain(&mut self, out: &mut Drained) -> Result<usize, RingError> {
        out.clear();
        let taken = self.drain_records(out);
        if taken.is_err() {
            out.clear();
        }
        taken
    }

    fn drain_records(&mut self, out: &mut Drained) -> Result<usize, RingError> {
        let mut available = self.available()?;
        let mut head = self.head;
        while available > 0 {
            if available < RECORD_HEADER_BYTES as u64 {
                return Err(RingError::Corrupt("partial record header"));
            }
            let mut header = [0u8; RECORD_HEADER_BYTES];
            self.memory.copy_out(head, &mut header);
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let check = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            if check != !len {
                return Err(RingError::Corrupt("record header check failed"));
            }
            let record = padded(len as usize) as u64;
            if record > available {
                return Err(RingError::Corrupt("record longer than the published bytes"));
            }
            self.memory.copy_out(head + RECORD_HEADER_BYTES as u64, out.append(len as usize));
            head += record;
            available -= record;
        }
        if !out.is_empty() {
            self.head = head;
            self.memory.atomic_u64(HEAD_OFFSET).store(head, Ordering::Release);
        }
        Ok(out.len())
    }

    /// Announces that this consumer is about to sleep on its eventfd. Returns false if a
    /// message arrived meanwhile: then the consumer must not sleep (it is marked awake again).
    pub fn prepare_sleep(&self) -> Result<bool, RingError> {
        self.memory.sleeping().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.is_empty()? {
            return Ok(true);
        }
        self.wake_up();
        Ok(false)
    }

    /// Marks this consumer awake: producers need not signal.
    pub fn wake_up(&self) {
        self.memory.sleeping().store(0, Ordering::SeqCst);
    }

    /// Writes arbitrary bytes over the shared tail: only for tests of corruption handling.
    #[cfg(test)]
    fn corrupt_tail(&self, tail: u64) {
        self.memory.atomic_u64(TAIL_OFFSET).store(tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(capacity: usize) -> (Producer, Consumer, Arc<Mapping>) {
        let fd = Mapping::create_memfd("ring-test", ring_bytes(capacity)).expect("memfd");
        let mapping = Arc::new(Mapping::map(&fd).expect("map"));
        init_ring(&mapping, 0, capacity).expect("init");
        let producer = Producer::open(mapping.clone(), 0).expect("producer");
        let consumer = Consumer::open(mapping.clone(), 0).expect("consumer");
        (producer, consumer, mapping)
    }

    /// Messages of odd sizes cross the end of the data area many times and come out whole.
    #[test]
    fn wraps_around_and_keeps_every_message_intact() {
        let (mut producer, mut consumer, _mapping) = ring(4096);
        let mut out = Drained::new();
        for round in 0..2000u32 {
            let message: Vec<u8> = (0..(round % 300) + 1).map(|i| (i ^ round) as u8).collect();
            producer.push(&message).expect("room after every drain");
            assert_eq!(consumer.drain(&mut out).expect("drain"), 1);
            assert_eq!(out.iter().collect::<Vec<_>>(), [message.as_slice()]);
        }
    }

    /// A batch written before the consumer looks arrives in one drain, in order.
    #[test]
    fn drains_a_whole_batch_at_once() {
        let (mut producer, mut consumer, _mapping) = ring(1 << 16);
        for i in 0..500u32 {
            producer.push(&i.to_le_bytes()).expect("push");
        }
        let mut out = Drained::new();
        assert_eq!(consumer.drain(&mut out).expect("drain"), 500);
        assert_eq!(out.len(), 500);
        for (i, message) in out.iter().enumerate() {
            assert_eq!(message, (i as u32).to_le_bytes());
        }
        assert!(consumer.is_empty().expect("consistent"));
        assert_eq!(consumer.drain(&mut out).expect("drain"), 0);
        assert!(out.is_empty(), "a drain replaces the previous batch");
    }

    /// A full ring refuses with Full (never blocks), and accepts again once drained.
    #[test]
    fn full_ring_is_backpressure() {
        let (mut producer, mut consumer, _mapping) = ring(4096);
        let message = [7u8; 1000];
        let mut pushed = 0;
        while producer.push(&message).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed, 4096 / padded(1000));
        assert_eq!(producer.push(&message), Err(RingError::Full));
        let mut out = Drained::new();
        consumer.drain(&mut out).expect("drain");
        assert_eq!(out.len(), pushed);
        producer.push(&message).expect("room again");
        assert!(matches!(producer.push(&[0u8; 5000]), Err(RingError::TooLarge { .. })));
    }

    /// A record length that does not match its check, a record longer than what was published,
    /// or a tail past the capacity, is an error.
    #[test]
    fn corrupt_lengths_are_errors() {
        let (mut producer, mut consumer, mapping) = ring(4096);
        producer.push(b"hello").expect("push");
        assert!(mapping.write(RING_HEADER_BYTES as u64, &u32::MAX.to_le_bytes()));
        let mut out = Drained::new();
        assert!(matches!(consumer.drain(&mut out), Err(RingError::Corrupt(_))));

        let (mut producer, mut consumer, mapping) = ring(4096);
        producer.push(b"good").expect("push");
        producer.push(b"hello").expect("push");
        assert!(mapping.write((RING_HEADER_BYTES + padded(4)) as u64, &u32::MAX.to_le_bytes()));
        assert!(matches!(consumer.drain(&mut out), Err(RingError::Corrupt(_))));
        assert!(out.is_empty(), "a failed drain takes nothing, not even the good record before");
        assert!(!consumer.is_empty().expect("consistent"), "the head did not move");

        let (mut producer, mut consumer, mapping) = ring(4096);
        producer.push(b"hello").expect("push");
        let huge = 100_000u32;
        let mut header = huge.to_le_bytes().to_vec();
        header.extend_from_slice(&(!huge).to_le_bytes());
        assert!(mapping.write(RING_HEADER_BYTES as u64, &header));
        assert!(matches!(consumer.drain(&mut out), Err(RingError::Corrupt(_))));

        let (_producer, mut consumer, _mapping) = ring(4096);
        consumer.corrupt_tail(1 << 40);
        assert!(matches!(consumer.drain(&mut out), Err(RingError::Corrupt(_))));
        assert!(out.is_empty());
    }

    /// The sleep handshake: a producer signals only a consumer that announced sleep, once.
    #[test]
    fn producer_wakes_only_a_sleeping_consumer() {
        let (mut producer, consumer, _mapping) = ring(4096);
        producer.push(b"a").expect("push");
        assert!(!producer.consumer_needs_wake());
        assert!(!consumer.prepare_sleep().expect("consistent"), "a message is waiting: do not sleep");
        let (mut producer, consumer, _mapping) = ring(4096);
        assert!(consumer.prepare_sleep().expect("consistent"));
        producer.push(b"a").expect("push");
        assert!(producer.consumer_needs_wake());
        producer.push(b"b").expect("push");
        assert!(!producer.consumer_needs_wake(), "one signal per sleep");
    }
}
