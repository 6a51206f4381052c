//! The store: every topic under `base_dir` (spec `zper.md` §6.1).

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tracing::info;
use zper_wire::identity::validate_topic;

use crate::{FlushPolicy, StoreError, TopicLog};

/// Store settings, from the node's config (spec `zper.md` §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Data root (`base_dir`); created if missing.
    pub base_dir: PathBuf,
    /// Rotation threshold in bytes (`segment_size`).
    pub segment_size: u64,
    /// Flush rule (`flush_messages`, `flush_interval`).
    pub flush: FlushPolicy,
    /// Retention age (`retain_hours`).
    pub retain: Duration,
    /// Whether an empty final frame is a valid message when parsing (`allow_empty_message`, §6.3).
    pub allow_empty_message: bool,
}

impl Default for StoreConfig {
    /// The original's code defaults (§7), with data under `./data`.
    fn default() -> Self {
        StoreConfig {
            base_dir: PathBuf::from("./data"),
            segment_size: 536_870_912,
            flush: FlushPolicy {
                flush_messages: 10_000,
                flush_interval: Duration::from_millis(10_000),
            },
            retain: Duration::from_secs(168 * 3600),
            allow_empty_message: true,
        }
    }
}

/// The store name (and directory) of a topic's fragment: the topic itself for fragment 0 (what
/// ZPER's layout and unchanged clients know, spec §6.1), `<topic>.<k>` for fragment k > 0 (a
/// dot never appears in a topic name, so the two cannot collide; ZPER never lists such a
/// directory).
pub fn log_key(topic: &str, fragment: u32) -> String {
    if fragment == 0 {
        topic.to_owned()
    } else {
        format!("{topic}.{fragment}")
    }
}

/// True for a topic name or a `<topic>.<k>` fragment key with k >= 1.
fn valid_key(key: &str) -> bool {
    match key.split_once('.') {
        None => validate_topic(key.as_bytes()).is_ok(),
        Some((topic, k)) => {
            validate_topic(topic.as_bytes()).is_ok()
                && !k.starts_with('0')
                && k.parse::<u32>().is_ok_and(|k| k >= 1)
        }
    }
}

/// All topics of one data directory.
#[derive(Debug)]
pub struct Store {
    config: StoreConfig,
    topics: RwLock<HashMap<String, Arc<TopicLog>>>,
    /// The exclusive lock on `<base_dir>/.lock`, held while the store is open.
    _lock: fs::File,
}

/// File in `base_dir` whose exclusive lock marks the directory as in use (not a topic name).
pub const LOCK_FILE: &str = ".lock";

/// Takes the exclusive lock on `<dir>/.lock` and writes this process' id into it.
///
/// Errors: `Locked` naming the holder when another open file holds it; I/O.
fn lock_dir(dir: &std::path::Path) -> Result<fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io("open lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = text.trim();
            return Err(StoreError::Locked {
                dir: dir.to_owned(),
                holder: if holder.is_empty() {
                    "unknown".into()
                } else {
                    holder.to_owned()
                },
            });
        }
        Err(fs::TryLockError::Error(e)) => return Err(StoreError::io("lock", &path, e)),
    }
    let io = |op, e| StoreError::io(op, &path, e);
    file.set_len(0).map_err(|e| io("truncate lock file", e))?;
    file.rewind().map_err(|e| io("seek lock file", e))?;
    writeln!(file, "pid {}", std::process::id()).map_err(|e| io("write lock file", e))?;
    Ok(file)
}

impl Store {
    /// Opens `base_dir`, recovering every topic directory found in it (a directory whose name is a
    /// valid topic; anything else is ignored).
    ///
    /// Errors: `base_dir` can't be created or read (for example it is a file); `Locked` when
    /// another store holds it (issue #13); a segment can't be opened or recovered.
    pub fn open(config: StoreConfig) -> Result<Store, StoreError> {
        let dir = &config.base_dir;
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create base_dir", dir, e))?;
        let lock = lock_dir(dir)?;
        let mut topics = HashMap::new();
        for entry in fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("list", dir, e))?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !is_dir || !valid_key(&name) {
                continue;
            }
            let log = TopicLog::open(
                &name,
                &entry.path(),
                config.segment_size,
                config.allow_empty_message,
            )?;
            topics.insert(name, Arc::new(log));
        }
        info!(base_dir = %dir.display(), topics = topics.len(), "store opened");
        Ok(Store {
            config,
            topics: RwLock::new(topics),
            _lock: lock,
        })
    }

    /// The settings the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The topic, if it exists.
    pub fn topic(&self, name: &str) -> Option<Arc<TopicLog>> {
        self.topics.read().ok()?.get(name).cloned()
    }

    /// The topic (or fragment log, see [`log_key`]), created (directory and first segment) if
    /// it does not exist.
    ///
    /// Errors: invalid name (spec §3) or key; I/O.
    pub fn topic_or_create(&self, name: &str) -> Result<Arc<TopicLog>, StoreError> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !valid_key(name) {
            return Err(StoreError::InvalidTopic(name.to_owned()));
        }
        let mut topics = self
            .topics
            .write()
            .map_err(|_| StoreError::Poisoned(name.to_owned()))?;
        if let Some(t) = topics.get(name) {
            return Ok(t.clone());
        }
        let log = Arc::new(TopicLog::open(
            name,
            &self.config.base_dir.join(name),
            self.config.segment_size,
            self.config.allow_empty_message,
        )?);
        info!(topic = name, "topic created");
        topics.insert(name.to_owned(), log.clone());
        Ok(log)
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<TopicLog>> {
        let mut all: Vec<_> = self
            .topics
            .read()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// Flushes every topic and records its high-water mark (clean shutdown). Returns the first error after trying all.
    pub fn flush_all(&self) -> Result<(), StoreError> {
        let mut first = None;
        for t in self.topics() {
            let done = t
                .flush()
                .and_then(|_| t.sync_checksums())
                .and_then(|()| t.checkpoint_high_water());
            if let Err(e) = done {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Applies retention to every topic at `now` with the store's `retain`; returns how many
    /// segments were deleted.
    pub fn apply_retention(&self, now: SystemTime) -> Result<usize, StoreError> {
        self.apply_retention_with(now, |_| None)
    }

    /// Applies retention to every topic at `now`; `retain_of(key)` gives a topic's own
    /// retention (issue #13: a topic's `retain_hours` wins over the node's), `None` for the
    /// store's. Returns how many segments were deleted.
    pub fn apply_retention_with(
        &self,
        now: SystemTime,
        retain_of: impl Fn(&str) -> Option<Duration>,
    ) -> Result<usize, StoreError> {
        let mut n = 0;
        for t in self.topics() {
            let retain = retain_of(t.name()).unwrap_or(self.config.retain);
            n += t.apply_retention(retain, now)?.len();
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_opens_once_and_the_refusal_names_the_holder() {
        let dir = tempfile::tempdir().expect("tmp");
        let config = StoreConfig {
            base_dir: dir.path().to_owned(),
            ..StoreConfig::default()
        };
        let first = Store::open(config.clone()).expect("open");
        match Store::open(config.clone()) {
            Err(e @ StoreError::Locked { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("pid {}", std::process::id())),
                    "{text}"
                );
                assert!(text.contains("base_dir"), "a hint: {text}");
            }
            other => panic!("a second open must be refused: {other:?}"),
        }
        drop(first);
        Store::open(config).expect("free again once the first is closed");
    }

    #[test]
    fn fragment_keys_cannot_collide_with_topics() {
        assert_eq!(log_key("orders", 0), "orders");
        assert_eq!(log_key("orders", 2), "orders.2");
        assert!(valid_key("orders") && valid_key("orders.2") && valid_key("orders.1024"));
        for bad in [
            "orders.0",
            "orders.02",
            "orders.x",
            "orders.",
            ".2",
            "or-ders.2",
            "a.b.2",
        ] {
            assert!(!valid_key(bad), "{bad}");
        }
    }
}
