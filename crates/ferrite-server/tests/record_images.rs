//! Stored values reach the write-ahead log byte for byte, so a client can store values that hold
//! well-formed log record images. This test stores such values, forged as well as a client could
//! wish (every record kind, the salts of the log's own segments read from the data directory
//! while the server runs, the LSNs the log is about to give), drives the log through segment
//! recycling with frequent checkpoints, kills the server with SIGKILL and restarts it, several
//! times. After every restart the pool must hold exactly what was acknowledged: no image is ever
//! replayed, and none stops a restart.

mod common;

use std::collections::BTreeMap;
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

/// The salt in the header of every log segment file of shard 0 (valid or not).
fn segment_salts(data_dir: &Path) -> Vec<u64> {
    let wal = data_dir.join("shard-0").join("wal");
    let mut salts: Vec<u64> = std::fs::read_dir(&wal)
        .expect("the log directory")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        .filter_map(|entry| std::fs::read(entry.path()).ok())
        .filter(|bytes| bytes.len() >= 48)
        .map(|bytes| u64::from_le_bytes(bytes[40..48].try_into().expect("8 bytes")))
        .collect();
    salts.extend([0, 1]);
    salts.sort_unstable();
    salts.dedup();
    salts
}

/// Images of every record kind (a pool's creation, its deletion, a transaction overwriting its
/// table), each under every salt and for each of the next LSNs.
fn forged_images(salts: &[u64], next_lsn: u64) -> Vec<u8> {
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
    let memory = vec![0xa5u8; 1 << 13];
    let mut payloads = Vec::new();
    let mut created = Vec::new();
    encode_pool_created(&descriptor, &mut vec![(0, 4096)], &memory, &mut created);
    let mut deleted = Vec::new();
    encode_pool_deleted(1, &mut deleted);
    let mut transaction = Vec::new();
    encode_transaction(1, &mut vec![(0, 8192)], &memory, &mut transaction);
    payloads.extend([created, deleted, transaction]);
    let mut value = Vec::new();
    for salt in salts {
        for lsn in next_lsn..next_lsn + 6 {
            for payload in &payloads {
                for commit_first_lsn in [lsn, next_lsn] {
                    encode_record(lsn, RecordPlace { salt: *salt, commit_first_lsn }, payload, &mut value);
                }
            }
        }
    }
    value
}

#[test]
fn values_holding_record_images_never_become_records() {
    let data_dir = fresh_dir("record-images").join("data");
    let mut server = start(&data_dir);
    let mut acknowledged: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for round in 0..ROUNDS {
        let session = Session::connect(&server.addr_string()).expect("connect");
        let pool = session.create_pool("images", PoolOptions::default()).expect("create or open");
        for step in 0..40 {
            let next_lsn = session.statistics().expect("statistics")[0].get("durable_lsn").unwrap_or(0) + 1;
            let mut value = forged_images(&segment_salts(&data_dir), next_lsn);
            value.truncate(50_000);
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
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}
