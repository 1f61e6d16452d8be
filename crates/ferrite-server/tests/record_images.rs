//! Stored values reach the write-ahead log byte for byte, so a client can store values that hold
//! well-formed log record images. This test stores such values, forged as well as a client could
//! wish (every record kind, under the salts of the log's own segments read from the data
//! directory while the server runs, the newest segment's in every value and each of the others
//! in turn, and the LSNs the log is about to give), drives the log through segment
//! recycling with frequent checkpoints, kills the server with SIGKILL and restarts it, several
//! times. After every restart the pool must hold exactly what was acknowledged: no image is ever
//! replayed, and none stops a restart.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::PoolOptions;
use ferrite_store::persistence::ssd::record::{encode_pool_created, encode_pool_deleted, encode_transaction};
use ferrite_store::persistence::ssd::PoolDescriptor;
use ferrite_store::persistence::wal::{encode_record, RecordPlace};
use ferrite_store::PoolSpec;

const ROUNDS: usize = 5;

fn start(data_dir: &Path) -> TestServer {
    TestServer::builder()
        .data_dir(data_dir)
        .config("value_bytes_max", 262_144)
        .append_config(
            "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 1",
        )
        .start()
}

/// The salt in the header of every log segment file of shard 0 (valid or not), held ones
/// (`.held`, whose records checkpoints read large values from) included, the newest salted
/// segment's first (the one the next records go to; a spare made ahead has none yet), then 0
/// and 1.
fn segment_salts(data_dir: &Path) -> Vec<u64> {
    let wal = data_dir.join("shard-0").join("wal");
    let mut segments: Vec<(String, u64)> = std::fs::read_dir(&wal)
        .expect("the log directory")
        .filter_map(Result::ok)
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.path()))
        .filter(|(name, _)| name.ends_with(".log") || name.ends_with(".held"))
        .filter_map(|(name, path)| Some((name, std::fs::read(path).ok()?)))
        .filter(|(_, bytes)| bytes.len() >= 48)
        .map(|(name, bytes)| (name, u64::from_le_bytes(bytes[40..48].try_into().expect("8 bytes"))))
        .filter(|(_, salt)| *salt != 0)
        .collect();
    // Names sort by sequence number; the newest segment still in the log goes first.
    segments.sort_unstable_by(|a, b| (b.0.ends_with(".log"), &b.0).cmp(&(a.0.ends_with(".log"), &a.0)));
    let mut salts: Vec<u64> = Vec::new();
    for salt in segments.into_iter().map(|(_, salt)| salt).chain([0, 1]) {
        if !salts.contains(&salt) {
            salts.push(salt);
        }
    }
    salts
}

/// Most bytes of images in one value (the server's inline limit here is 256 KiB).
const IMAGE_BYTES_MAX: usize = 240 << 10;

/// Images of every record kind (a pool's creation, its deletion, a transaction overwriting its
/// table), each for each of the next LSNs, under as many of `salts` as fit in one value: the
/// first salt always (the newest segment's), then others from the `rotate`-th on, so that over
/// many values every salt the log uses is tried. Returns the images and the salts they use.
fn forged_images(salts: &[u64], rotate: usize, next_lsn: u64) -> (Vec<u8>, Vec<u64>) {
    let spec = PoolSpec { size_bytes: 1 << 20, expected_objects: 16 };
    let descriptor = PoolDescriptor {
        id: 1,
        name: "images".into(),
        spec,
        region_bytes: 1 << 22,
        indexed: false,
        async_default: false,
        plugins: Vec::new(),
        owner: None,
    };
    let memory = vec![0xa5u8; 1 << 12];
    let mut payloads = Vec::new();
    let mut created = Vec::new();
    encode_pool_created(&descriptor, &mut vec![(0, 4096)], &memory, &mut created);
    let mut deleted = Vec::new();
    encode_pool_deleted(1, &mut deleted);
    let mut transaction = Vec::new();
    encode_transaction(1, &mut vec![(0, 4096)], &memory, &mut transaction);
    payloads.extend([created, deleted, transaction]);
    let others = salts.len().saturating_sub(1).max(1);
    let order = salts.iter().take(1).chain(salts.iter().skip(1).cycle().skip(rotate % others).take(others));
    let mut value = Vec::new();
    let mut used = Vec::new();
    for salt in order {
        let mut images = Vec::new();
        for lsn in next_lsn..next_lsn + 6 {
            for payload in &payloads {
                for commit_first_lsn in [lsn, next_lsn] {
                    encode_record(lsn, RecordPlace { salt: *salt, commit_first_lsn }, payload, &mut images);
                }
            }
        }
        if value.len() + images.len() > IMAGE_BYTES_MAX {
            break;
        }
        value.extend_from_slice(&images);
        used.push(*salt);
    }
    (value, used)
}

#[test]
fn values_holding_record_images_never_become_records() {
    let data_dir = fresh_dir("record-images").join("data");
    let mut server = start(&data_dir);
    let mut acknowledged: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Salts of the segment the next records went to, and the other real salts (of older
    // segments, recycled or held) images were stored under beside it.
    let (mut newest, mut older) = (BTreeSet::new(), BTreeSet::new());
    for round in 0..ROUNDS {
        let session = Session::connect(&server.addr_string()).expect("connect");
        let pool = session.create_pool("images", PoolOptions::default()).expect("create or open");
        for step in 0..40 {
            let next_lsn = session.statistics().expect("statistics")[0].get("durable_lsn").unwrap_or(0) + 1;
            let salts = segment_salts(&data_dir);
            newest.insert(salts[0]);
            let (value, used) = forged_images(&salts, round * 40 + step, next_lsn);
            assert!(used.contains(&salts[0]), "the newest segment's salt is always tried");
            older.extend(used.into_iter().filter(|salt| *salt > 1 && *salt != salts[0]));
            let key = format!("image-{round}-{step}");
            pool.put(&key, &value).expect("put");
            acknowledged.insert(key, value);
            // Filler that moves the log through its segments, so checkpoints recycle them.
            for i in 0..8 {
                let key = format!("filler-{}", (step * 8 + i) % 256);
                let value = vec![(round + step + i) as u8; 60_000];
                pool.put(&key, &value).expect("put");
                acknowledged.insert(key, value);
            }
        }
        let checkpoints = session.statistics().expect("statistics")[0].get("checkpoints").unwrap_or(0);
        assert!(checkpoints >= 1, "round {round}: checkpoints ran, so segments were recycled");
        drop((pool, session));
        server.kill9();
        server = start(&data_dir);
        let session = Session::connect(&server.addr_string()).expect("connect after restart");
        let pool = session.open_pool("images").expect("the pool survives");
        assert_eq!(pool.count().expect("count"), acknowledged.len() as u64, "round {round}");
        for (key, value) in &acknowledged {
            assert_eq!(&pool.get(key).expect("every acknowledged put"), value, "round {round}, {key}");
        }
        let pools = session.list_pools().expect("list");
        assert_eq!(pools.len(), 1, "no forged creation or deletion was replayed: {pools:?}");
    }
    assert!(!older.is_empty(), "images under the log's own salts, not only the newest ({newest:?})");
    assert!(newest.iter().all(|salt| *salt > 1), "the log's segments have salts of their own: {newest:?}");
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}
