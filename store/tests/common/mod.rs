//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use zper_store::{FlushPolicy, StoreConfig};

/// A store under `dir` with `segment_size`, flushing every 1000 messages or 1 s, 1 h retention.
pub fn config(dir: &Path, segment_size: u64) -> StoreConfig {
    StoreConfig {
        base_dir: dir.to_owned(),
        segment_size,
        flush: FlushPolicy {
            flush_messages: 1000,
            flush_interval: Duration::from_millis(1000),
        },
        retain: Duration::from_secs(3600),
        allow_empty_message: true,
    }
}
