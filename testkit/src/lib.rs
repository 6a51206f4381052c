//! zper-testkit: what zper's tests share (a dev-dependency only). Nodes in process
//! ([`TestNode`]) or as child processes ([`ChildNode`], kill -9 and SIGSTOP included), free
//! loopback ports, bounded waiting ([`eventually`]), raw ZPER clients and a ZMTP/2.0 peer that
//! speak bytes as an unchanged client would, a minimal HTTP client, and a TCP proxy that can be
//! cut like a firewall rule. Helpers panic with a message on set-up failures: they are for tests.
#![allow(missing_docs, clippy::unwrap_used)]

mod child;
mod cluster;
mod http;
mod in_process;
mod net;
mod wait;
mod zmq_client;

pub use child::{rss_bytes, zper_binary, ChildNode};
pub use cluster::{
    concat, ids_in, live_brokers, message_ends, raft_leader, segment_files, TestCluster,
};
pub use http::{get_json, http, http_with_token};
pub use in_process::{test_config, TestNode};
pub use net::{free_port, CutProxy};
pub use wait::{eventually, eventually_every, eventually_within, run_bounded, Finished};
pub use zmq_client::{client, fetch_frames, identity, read_all, request, Zmtp2, UUID};
