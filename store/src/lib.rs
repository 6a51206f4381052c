//! zper-store: the segment log of spec `zper.md` §6, with the flush, rotation, retention and
//! recovery rules of §4.3, §4.4 and §6.4 (fixed where the spec marks bugs).
//!
//! A [`Store`] owns `<base_dir>/<topic>/<20-digit start offset>.dat` files. Offsets are absolute
//! byte positions in a topic's concatenated log. Readers never see bytes past a topic's flushed
//! offset. This crate must never touch the network, zmq or an async runtime: the node drives it
//! from its own threads.

mod checkpoint;
pub mod checksum;
mod count;
mod epochs;
mod error;
pub mod flush;
mod index;
mod plan;
mod reading;
mod recovery;
mod replica;
mod scan;
pub mod segment;
mod store;
mod tail;
mod topic;
mod writing;

pub use checkpoint::{CHECKPOINT_EVERY, HIGH_WATER_FILE};
pub use epochs::EPOCHS_FILE;
pub use error::StoreError;
pub use flush::FlushPolicy;
pub use reading::{Fetched, FetchedRange, RawMessages};
pub use recovery::CHECKSUMS_FROM_FILE;
pub use replica::ReplicaChunk;
pub use store::{log_key, Store, StoreConfig, LOCK_FILE};
pub use tail::TailMessage;
pub use topic::{Damage, FlushOutcome, TopicLog};
