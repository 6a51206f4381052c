//! The node's membership in the Raft metadata group (issue #3): a tokio runtime running the
//! openraft member ([`zper_raft::ClusterNode`]), its HTTP server ([`zper_http`]) and a
//! registrar that registers this node, renews its lease, and — on the leader — records the
//! Dolly leader and fails fragments over from nodes whose lease ended. zmq endpoints never run
//! on this runtime.

use std::net::TcpListener;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};
use zper_raft::metadata::{Command, MetadataError, PeerEndpoints};
use zper_raft::{ClusterConfig, ClusterNode, NodeEndpoints};

use crate::config::NodeConfig;
use crate::endpoint::Endpoints;
use crate::error::NodeError;

/// A running cluster member.
pub(crate) struct Member {
    runtime: tokio::runtime::Runtime,
    node: ClusterNode,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Advertised HTTP address.
    pub(crate) http: String,
    /// The address the HTTP listener is bound to (`http.bind` with port 0 resolved).
    pub(crate) http_bound: String,
    /// Advertised relay endpoint.
    pub(crate) relay: String,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `tcp://*:5555` or `tcp://0.0.0.0:5555` as seen from `host`.
fn advertise(endpoint: &str, host: &str) -> String {
    match endpoint.rsplit_once(':') {
        Some((_, port)) if endpoint.starts_with("tcp://") => format!("tcp://{host}:{port}"),
        _ => endpoint.to_owned(),
    }
}

impl Member {
    /// Binds the HTTP address, starts Raft (initializing the group if this is a fresh initial
    /// voter) and the registrar.
    pub(crate) fn start(
        config: &NodeConfig,
        zmq: &Endpoints,
        counters: std::sync::Arc<crate::metrics::Counters>,
        store: std::sync::Arc<zper_store::Store>,
    ) -> Result<Member, NodeError> {
        let c = &config.cluster;
        let listener = TcpListener::bind(&c.http_bind).map_err(|e| NodeError::Http {
            endpoint: c.http_bind.clone(),
            source: e,
        })?;
        let bound = listener.local_addr().map_err(|e| NodeError::Http {
            endpoint: c.http_bind.clone(),
            source: e,
        })?;
        let http = c.http_advertise.clone().unwrap_or_else(|| {
            let host = if bound.ip().is_unspecified() {
                "127.0.0.1".to_owned()
            } else {
                bound.ip().to_string()
            };
            format!("{host}:{}", bound.port())
        });
        let host = http
            .rsplit_once(':')
            .map_or("127.0.0.1", |(h, _)| h)
            .to_owned();
        // What clients are told: `<endpoint>.advertise` when set (issue #15), else the bound
        // port with the advertised host. Peers keep the latter.
        let client = |key: &str, bound: &str| {
            config
                .client_advertise
                .get(key)
                .cloned()
                .unwrap_or_else(|| advertise(bound, &host))
        };
        let peer = PeerEndpoints {
            writer: advertise(&zmq.writer, &host),
            reader: advertise(&zmq.reader, &host),
            relay: advertise(&zmq.relay, &host),
        };
        let endpoints = NodeEndpoints {
            name: c.node_name.clone(),
            writer: client("writer.advertise", &zmq.writer),
            reader: client("reader.advertise", &zmq.reader),
            ack: client("ack.advertise", &zmq.ack),
            controller: client("controller.advertise", &zmq.controller),
            replica: config
                .replica_advertise
                .clone()
                .unwrap_or_else(|| advertise(&zmq.replica, &host)),
            relay: client("relay.advertise", &zmq.relay),
            dolly_requests: client("dolly.requests.advertise", &zmq.dolly_requests),
            dolly_updates: client("dolly.updates.advertise", &zmq.dolly_updates),
            dolly_snapshots: client("dolly.snapshots.advertise", &zmq.dolly_snapshots),
            http: http.clone(),
            peer: None,
        };
        let endpoints = NodeEndpoints {
            peer: (peer.writer != endpoints.writer
                || peer.reader != endpoints.reader
                || peer.relay != endpoints.relay)
                .then_some(peer),
            ..endpoints
        };
        let relay = endpoints.peer_relay().to_owned();
        // The voters list this node's own address: it must be the one it advertises, or its
        // registration would be refused as a duplicate id (and peers could not reach it).
        if let Some(listed) = c.voters.get(&c.node_id) {
            if *listed != http {
                return Err(NodeError::Config(format!(
                    "controller.quorum.{id} is {listed} but this node advertises {http}: set \
                     http.advertise = {listed} (or fix the voters), or check that no other \
                     node uses node.id {id}",
                    id = c.node_id
                )));
            }
        }
        let mut voters: std::collections::BTreeMap<u64, NodeEndpoints> = c
            .voters
            .iter()
            .map(|(id, addr)| {
                (
                    *id,
                    NodeEndpoints {
                        name: format!("node{id}"),
                        http: addr.clone(),
                        ..Default::default()
                    },
                )
            })
            .collect();
        if voters.is_empty() || voters.contains_key(&c.node_id) {
            voters.insert(c.node_id, endpoints.clone());
        } else {
            info!(
                id = c.node_id,
                "not an initial voter: waiting to be added (zper cluster add-node)"
            );
        }
        // TLS on the admin port (issue #19): the files are read here, so a bad one stops the
        // node at start with the file named.
        let cert_check = match (&c.tls_cert, &c.tls_ca) {
            (Some(cert), Some(ca)) => Some((cert.clone(), ca.clone(), http.clone())),
            _ => None,
        };
        if let Some(problem) = cert_check
            .as_ref()
            .and_then(|(cert, ca, host)| zper_raft::tls::check_own_certificate(cert, ca, host))
        {
            warn!(%problem, "TLS certificate");
        }
        let (server_tls, peer_tls) = match (&c.tls_cert, &c.tls_key, &c.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => (
                Some(zper_raft::tls::server_config(cert, key)?),
                zper_raft::tls::PeerTls::trusting(ca)?,
            ),
            _ => (None, zper_raft::tls::PeerTls::plain()),
        };
        let raft_config = ClusterConfig {
            id: c.node_id,
            endpoints: endpoints.clone(),
            voters,
            dir: c
                .raft_dir
                .clone()
                .unwrap_or_else(|| config.store.base_dir.join(".raft")),
            heartbeat_ms: c.heartbeat_ms,
            election_timeout_ms: c.election_timeout_ms,
            snapshot_every: 1000,
            admin_token: c.admin_token.clone(),
            tls: peer_tls,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zper-cluster")
            .enable_all()
            .build()
            .map_err(|e| NodeError::Http {
                endpoint: "tokio runtime".into(),
                source: e,
            })?;
        let node = runtime.block_on(ClusterNode::start(&raft_config))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NodeError::Http {
                endpoint: c.http_bind.clone(),
                source: e,
            })?;
        let server = {
            let _guard = runtime.enter();
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| NodeError::Http {
                    endpoint: c.http_bind.clone(),
                    source: e,
                })?;
            let registry = prometheus::Registry::new();
            match crate::cluster_metrics::ClusterCollector::new(
                c.node_id,
                node.clone(),
                store.clone(),
                counters.clone(),
            ) {
                Ok(cm) => {
                    if let Err(e) = registry.register(Box::new(cm)) {
                        warn!(error = %e, "cluster metrics not registered");
                    }
                }
                Err(e) => warn!(error = %e, "cluster metrics unavailable"),
            }
            // RSS, open fds, CPU seconds (`process_*`).
            if let Err(e) = registry.register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            )) {
                warn!(error = %e, "process metrics not registered");
            }
            match crate::memory::HeapCollector::new() {
                Ok(c) => {
                    if let Err(e) = registry.register(Box::new(c)) {
                        warn!(error = %e, "heap metrics not registered");
                    }
                }
                Err(e) => warn!(error = %e, "heap metrics unavailable"),
            }
            match crate::metrics::CountersCollector::new(counters) {
                Ok(c) => {
                    if let Err(e) = registry.register(Box::new(c)) {
                        warn!(error = %e, "node metrics not registered");
                    }
                }
                Err(e) => warn!(error = %e, "node metrics unavailable"),
            }
            zper_http::serve_router_tls(
                listener,
                zper_http::router_with(
                    node.clone(),
                    zper_http::AdminOptions {
                        registry,
                        admin_token: c.admin_token.clone(),
                        logs: Some(std::sync::Arc::new(StoreLogs { store, cert_check })),
                        dolly_put_timeout: Some(config.dolly_put_timeout),
                    },
                ),
                server_tls,
            )
        };
        let registrar = runtime.spawn(register(
            node.clone(),
            endpoints,
            Duration::from_millis(c.lease_ms),
        ));
        let supervisor = runtime.spawn(supervise(node.clone(), Duration::from_millis(c.lease_ms)));
        let watchdog = runtime.spawn(watch_raft_core(node.clone()));
        info!(id = c.node_id, http = %http, "cluster member started");
        Ok(Member {
            runtime,
            node,
            tasks: vec![server, registrar, supervisor, watchdog],
            http,
            http_bound: bound.to_string(),
            relay,
        })
    }

    /// The runtime's handle (to propose from zmq threads without blocking them).
    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
        self.runtime.handle().clone()
    }

    /// The Raft member (to read metadata and the leader).
    pub(crate) fn node(&self) -> ClusterNode {
        self.node.clone()
    }

    /// Stops the registrar, the HTTP server and Raft.
    pub(crate) fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        let node = self.node.clone();
        if let Err(e) = self.runtime.block_on(node.raft.shutdown()) {
            warn!(error = %e, "raft shutdown");
        }
        drop(self.node);
        self.runtime.shutdown_timeout(Duration::from_secs(2));
    }
}

/// Most bytes one admin request reads per fragment to count its messages (`topics describe`).
const COUNT_BUDGET: u64 = 16 << 20;

/// The segment store as the admin API's [`zper_http::LocalLogs`]: fragment k of a topic is
/// stored under [`zper_store::log_key`] (the topic itself for fragment 0).
/// With TLS on the admin port, this node's own certificate is checked on every health request
/// (it may expire while the node runs): a certificate its peers would refuse is a problem.
struct StoreLogs {
    store: std::sync::Arc<zper_store::Store>,
    /// Certificate file, CA file and advertised `host:port`, when TLS is on.
    cert_check: Option<(std::path::PathBuf, std::path::PathBuf, String)>,
}

impl zper_http::LocalLogs for StoreLogs {
    fn offsets(&self, topic: &str, fragment: u32) -> Option<zper_http::FragmentOffsets> {
        let log = self.store.topic(&zper_store::log_key(topic, fragment))?;
        let start_offset = log.segment_starts().ok()?.first().copied().unwrap_or(0);
        let end_offset = log.flushed_end().ok()?;
        Some(zper_http::FragmentOffsets {
            start_offset,
            end_offset,
            high_water: log.high_water().ok()?,
            epochs: log.epochs().ok()?,
            // Bounded per request: a large store is counted over several requests.
            messages: log.message_count(COUNT_BUDGET).ok().flatten(),
        })
    }

    fn problems(&self) -> Vec<String> {
        let certificate = self
            .cert_check
            .as_ref()
            .and_then(|(cert, ca, host)| zper_raft::tls::check_own_certificate(cert, ca, host));
        self.store
            .topics()
            .iter()
            .filter_map(|log| {
                let d = log.damage().ok().flatten()?;
                let ranges = log.damaged_ranges().unwrap_or_default();
                let fenced = if ranges.is_empty() {
                    String::new()
                } else {
                    let list: Vec<String> =
                        ranges.iter().map(|(a, b)| format!("[{a}, {b})")).collect();
                    format!(
                        "; bytes {} are not served (readers resume at the end of a range)",
                        list.join(", ")
                    )
                };
                Some(format!(
                    "{}: this node's copy is damaged from offset {} (checksum mismatches found: {}){fenced}; it repairs from an in-sync replica if one holds the data",
                    log.name(),
                    d.at,
                    log.corruptions().unwrap_or(0)
                ))
            })
            .chain(certificate)
            .collect()
    }

    fn warnings(&self) -> Vec<String> {
        self.store
            .topics()
            .iter()
            .filter_map(|log| {
                let unchecked = log.unchecked_segments().ok()?;
                (!unchecked.is_empty()).then(|| format!(
                    "{}: the checksum sidecars of the segments starting at {unchecked:?} are missing or damaged: their bytes are served unchecked",
                    log.name()
                ))
            })
            .collect()
    }
}

/// Exit status of a node whose Raft core stopped on its own (issue #13).
pub const EXIT_RAFT_STOPPED: i32 = 75;

/// Exits the process (status [`EXIT_RAFT_STOPPED`]) when the Raft core stops while the node
/// runs (a storage error such as a full disk under `raft.dir`): a node without its Raft core
/// can neither renew its lease nor learn placement, so it says so by exiting and lets its
/// supervisor restart it once the cause is gone (issue #13). A clean shutdown aborts this
/// task before it stops Raft.
async fn watch_raft_core(node: ClusterNode) {
    let mut metrics = node.raft.metrics();
    loop {
        let stopped = {
            let m = metrics.borrow();
            match &m.running_state {
                Err(fatal) => Some(fatal.to_string()),
                Ok(()) if m.state == zper_raft::ServerState::Shutdown => {
                    Some("shut down".to_owned())
                }
                Ok(()) => None,
            }
        };
        if let Some(why) = stopped {
            tracing::error!(reason = %why, "the Raft core stopped (is the disk under raft.dir full or failing?): exiting so the supervisor restarts this node");
            std::process::exit(EXIT_RAFT_STOPPED);
        }
        if metrics.changed().await.is_err() {
            tracing::error!("the Raft core is gone: exiting so the supervisor restarts this node");
            std::process::exit(EXIT_RAFT_STOPPED);
        }
    }
}

/// Renewals per lease: a renewal may take up to three quarters of a lease to commit before
/// the lease ends (`zper_node_lease_margin_min_seconds` shows how much of it was used).
const RENEWALS_PER_LEASE: u32 = 4;

/// Sleeps `period`, or less: until this node learns of a new Raft leader. A new leader has just
/// been elected, and renewals failed while there was none, so the lease is renewed at once
/// rather than left to run low (the new leader waits half a lease before it expires any).
async fn until_renewal(node: &ClusterNode, period: Duration) {
    let mut rx = node.raft.metrics();
    let leader = rx.borrow_and_update().current_leader;
    let new_leader = async {
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending::<()>().await;
            }
            let now = rx.borrow_and_update().current_leader;
            if now.is_some() && now != leader {
                return;
            }
        }
    };
    tokio::select! {
        _ = tokio::time::sleep(period) => {}
        _ = new_leader => {}
    }
}

/// Registers this node, then renews its lease [`RENEWALS_PER_LEASE`] times per lease (and at
/// once under a new Raft leader), recording each renewal's margin in `node.lease`.
async fn register(node: ClusterNode, endpoints: NodeEndpoints, lease: Duration) {
    let lease_ms = lease.as_millis() as u64;
    let id = node.id;
    let period = lease / RENEWALS_PER_LEASE;
    let mut registered = false;
    let mut last_refusal: Option<String> = None;
    // When the lease granted by the last committed renewal ends, ms since the epoch.
    let mut lease_until: Option<u64> = None;
    loop {
        // Only members register: a node not yet added, or removed, stays out of the metadata
        // (a removed node would otherwise re-register itself at its next heartbeat).
        let member = node
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .is_some();
        if !member {
            registered = false;
            lease_until = None;
            tokio::time::sleep(period).await;
            continue;
        }
        let now = now_ms();
        let command = if registered {
            Command::Heartbeat {
                id,
                now_ms: now,
                lease_ms,
            }
        } else {
            Command::RegisterNode {
                id,
                endpoints: endpoints.clone(),
                now_ms: now,
                lease_ms,
                incarnation: node.incarnation,
            }
        };
        match node.propose(command).await {
            Ok(Ok(_)) => {
                if let Some(until) = lease_until.filter(|_| registered) {
                    node.lease.record(until, now_ms());
                }
                lease_until = Some(now.saturating_add(lease_ms));
                registered = true;
                last_refusal = None;
            }
            Ok(Err(MetadataError::UnknownNode(_))) => registered = false,
            Ok(Err(e)) => {
                // Once per distinct refusal (a duplicate id or a removed node is a config
                // problem that repeats every heartbeat).
                let text = e.to_string();
                if last_refusal.as_deref() != Some(text.as_str()) {
                    tracing::error!(error = %text, "registration refused");
                    last_refusal = Some(text);
                }
                registered = false;
            }
            Err(e) => warn!(error = %e, "registration not committed"),
        }
        until_renewal(&node, period).await;
    }
}

/// How often, at least, the Raft leader looks for ended leases.
const SUPERVISE_EVERY: Duration = Duration::from_millis(100);

/// How long the supervisor sleeps at `now_ms`: until just after the next lease ends (so a dead
/// node's fragments move as soon as its lease allows, not up to a tick later), at most
/// [`SUPERVISE_EVERY`].
fn supervise_wait(next_lease_end: Option<u64>, now_ms: u64) -> Duration {
    next_lease_end
        .map(|end| Duration::from_millis(end.saturating_sub(now_ms) + 1))
        .map_or(SUPERVISE_EVERY, |d| d.min(SUPERVISE_EVERY))
}

/// On the Raft leader, every [`SUPERVISE_EVERY`] and as each lease ends: records itself as the
/// Dolly leader and re-runs placement (`ExpireLeases`) when a node whose lease ended still
/// leads a fragment or is in an ISR. A new leader first waits half a lease: leases may have
/// lapsed during the election through no fault of their holders, who renew every quarter of a
/// lease and at once under a new leader.
async fn supervise(node: ClusterNode, lease: Duration) {
    let id = node.id;
    let mut leading_since: Option<tokio::time::Instant> = None;
    let mut wait = SUPERVISE_EVERY;
    loop {
        tokio::time::sleep(wait).await;
        wait = SUPERVISE_EVERY;
        if node.leader() != Some(id) {
            leading_since = None;
            continue;
        }
        let since = *leading_since.get_or_insert_with(tokio::time::Instant::now);
        let meta = node.state.cluster_metadata();
        if meta.dolly_leader != Some(id) && meta.nodes.contains_key(&id) {
            let _ = node.propose(Command::SetDollyLeader { id }).await;
        }
        if since.elapsed() < lease / 2 {
            continue;
        }
        // Re-run placement when it would change something: apply is deterministic, so a dry
        // run on a copy tells.
        let now = now_ms();
        let command = Command::ExpireLeases { now_ms: now };
        let changes = !matches!(
            meta.clone().apply(&command),
            Ok(zper_raft::metadata::Applied::Placement(ref c)) if c.is_empty()
        );
        if changes {
            let _ = node.propose(command).await;
        }
        wait = supervise_wait(meta.next_lease_end(now), now_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisor_wakes_as_the_next_lease_ends_or_after_a_tick() {
        assert_eq!(supervise_wait(None, 1000), SUPERVISE_EVERY);
        assert_eq!(supervise_wait(Some(1030), 1000), Duration::from_millis(31));
        assert_eq!(supervise_wait(Some(5000), 1000), SUPERVISE_EVERY);
        // Already past (the dry run took a while): at once, almost.
        assert_eq!(supervise_wait(Some(990), 1000), Duration::from_millis(1));
    }
}
