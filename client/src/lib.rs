//! zper-client: the way to use zper from Rust. Everything a ZPER, Pirius or Dolly client does,
//! over the frames of `zper-wire` and libzmq, with no server code: this crate compiles neither
//! RocksDB, openraft nor axum.
//!
//! - [`Producer`]: writes messages in ack mode 0 (none), 1 (one ack per flush) or 2 (one reply
//!   per message) (`zper.md` §4); idempotent by default in modes 1 and 2: every message is
//!   stored once however often it is sent again, and it is sent again until acknowledged
//!   (issue #18). [`idempotent::produced`] asks what became of one.
//! - [`PlainProducer`]: the original ZPER producer, with the caller's message ids and no
//!   retries; refusals come back as [`ClientError::Refused`] with the typed [`Status`].
//! - [`IdempotentProducer`]: the idempotent one on its own, with its knobs.
//! - [`ReaderClient`]: OFFSET and FETCH (`zper.md` §5), [`fetch_messages`] to read a range.
//! - [`Subscriber`] and [`ResultsListener`]: subscription groups and results (`pirius.md`).
//! - [`DollyClient`]: Dolly's Get and Put (`dolly.md` §6).
//! - [`AdminClient`]: the HTTP admin API (`docs/operations.md`).
//! - [`Endpoints`]: where a node listens, defaults and discovery through the controller.
//!
//! ```no_run
//! use std::time::Duration;
//! use zper_client::{AckMode, Endpoints, Producer, ProducerOptions, ReaderClient};
//!
//! # fn main() -> Result<(), zper_client::ClientError> {
//! let ctx = zmq::Context::new();
//! let node = Endpoints::local();
//! // Mode 2: every send returns once the message is durable on min_insync replicas; it is
//! // sent again after a timeout or a failover, and stored once.
//! let opts = ProducerOptions::new("orders", AckMode::PerMessage);
//! let mut producer = Producer::connect(&ctx, &[node.writer.clone()], &opts)?;
//! let id = producer.send(&[b"hello"])?; // the message is [id:24]["hello"]
//! println!("stored as sequence {}", id.sequence);
//!
//! let reader = ReaderClient::connect(&ctx, &node.reader, "orders", Duration::from_secs(5))?;
//! let start = reader.offset(zper_client::Timestamp::Earliest)?;
//! let bytes = reader.fetch(start, 1 << 20)?.unwrap_or_default();
//! for record in zper_client::Records::new(&bytes) {
//!     println!("{}", String::from_utf8_lossy(record.payload));
//! }
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod curve;
pub mod dolly;
pub mod endpoints;
pub mod error;
pub mod idempotent;
pub mod options;
pub mod plain;
pub mod producer;
pub mod reader;
pub mod results;
pub mod subscriber;
mod unacked;

pub use admin::{AdminClient, AdminError};
pub use curve::ClientCurve;
pub use dolly::{DollyClient, DollyReply};
pub use endpoints::{connectable, endpoint, identity, random_uuid, Endpoints};
pub use error::ClientError;
pub use idempotent::{IdempotentOptions, IdempotentProducer, MessageId, Produced};
pub use options::ProducerOptions;
pub use plain::PlainProducer;
pub use producer::Producer;
pub use reader::{fetch_messages, ReaderClient};
pub use results::ResultsListener;
pub use subscriber::{Event, Subscriber, SubscriberError, SubscriberOptions};
pub use zper_wire::{AckMode, Records, Status, Timestamp};
