//! This node's view of fragment placement, refreshed from the Raft state machine whenever its
//! applied index moves (checked every [`REFRESH`]), so the data path never locks or copies the
//! metadata per message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use zper_raft::{ClusterNode, NodeEndpoints, NodeId};

/// How often the view checks for newly applied metadata.
pub const REFRESH: Duration = Duration::from_millis(10);

/// One fragment as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragmentView {
    /// Its topic.
    pub topic: String,
    /// Its id (0 for what unchanged clients use).
    pub id: u32,
    /// Leader node.
    pub leader: NodeId,
    /// Leader epoch.
    pub epoch: u64,
    /// Replicas, leader first.
    pub replicas: Vec<NodeId>,
    /// In-sync replicas.
    pub isr: Vec<NodeId>,
}

impl FragmentView {
    /// More than one copy: the log is replicated and its readers stop at the high-water mark.
    pub fn replicated(&self) -> bool {
        self.replicas.len() > 1
    }
}

/// What this node may do with a topic's fragment 0 (what unchanged clients use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not in the metadata, or one copy led here: the single-node behaviour.
    Local,
    /// This node leads a replicated fragment in `epoch`.
    Leader {
        /// Leader epoch.
        epoch: u64,
        /// In-sync replicas, the leader included.
        in_sync: usize,
        /// Replicas, the leader included.
        replicas: usize,
    },
    /// The metadata names this node leader but its lease is not current (just restarted,
    /// or cut off from the Raft group): it must neither append nor acknowledge.
    Fenced,
    /// Another node leads it.
    Follower {
        /// The leader.
        leader: NodeId,
    },
}

#[derive(Debug, Default)]
struct Snapshot {
    applied: u64,
    /// Every fragment by its store key ([`zper_store::log_key`]: the topic for fragment 0).
    fragments: HashMap<String, FragmentView>,
    /// Fragments per topic.
    counts: HashMap<String, u32>,
    nodes: HashMap<NodeId, NodeEndpoints>,
    /// This node's lease end as applied here, ms since the epoch: only once this run of the
    /// node has registered (its incarnation is in the metadata). Before that the metadata
    /// still holds the previous run's lease, and fragments it led are in the previous run's
    /// leader epoch, in which this run must not write (issue #13).
    own_lease: Option<u64>,
    /// Each topic's `retain_hours`.
    retain_hours: HashMap<String, u32>,
}

impl Snapshot {
    /// True while this run's lease ends after now (wall clock, as the leases are).
    fn lease_current(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.own_lease.is_some_and(|until| until > now)
    }
}

/// Shared, cheaply readable placement of every fragment, by store key.
#[derive(Debug, Clone)]
pub struct PlacementView {
    me: NodeId,
    inner: Arc<RwLock<Snapshot>>,
}

impl PlacementView {
    /// An empty view for node `me` (filled by [`PlacementView::refresh`]).
    pub fn new(me: NodeId) -> Self {
        PlacementView {
            me,
            inner: Arc::default(),
        }
    }

    /// This node's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Reloads from `cluster` if its applied index moved; true when it did.
    pub fn refresh(&self, cluster: &ClusterNode) -> bool {
        let applied = cluster.state.applied_index();
        if self.inner.read().is_ok_and(|s| s.applied == applied) {
            return false;
        }
        let built = cluster.state.with_metadata(|m| Snapshot {
            applied,
            fragments: m
                .topics
                .iter()
                .flat_map(|(name, t)| {
                    t.fragments.iter().map(move |f| {
                        (
                            zper_store::log_key(name, f.id),
                            FragmentView {
                                topic: name.clone(),
                                id: f.id,
                                leader: f.leader,
                                epoch: f.leader_epoch,
                                replicas: f.replicas.clone(),
                                isr: f.isr.clone(),
                            },
                        )
                    })
                })
                .collect(),
            counts: m
                .topics
                .iter()
                .map(|(name, t)| (name.clone(), t.fragments.len().max(1) as u32))
                .collect(),
            nodes: m
                .nodes
                .iter()
                .map(|(id, n)| (*id, n.endpoints.clone()))
                .collect(),
            own_lease: m
                .nodes
                .get(&self.me)
                .filter(|n| n.incarnation == cluster.incarnation)
                .map(|n| n.lease_until_ms),
            retain_hours: m
                .topics
                .iter()
                .map(|(name, t)| (name.clone(), t.retain_hours))
                .collect(),
        });
        match (built, self.inner.write()) {
            (Some(s), Ok(mut inner)) => {
                *inner = s;
                true
            }
            _ => false,
        }
    }

    /// How long the fragment stored under `key` keeps closed segments: its topic's
    /// `retain_hours` from the metadata; `None` for a topic the metadata does not have.
    pub fn retention(&self, key: &str) -> Option<Duration> {
        let hours = *self
            .inner
            .read()
            .ok()?
            .retain_hours
            .get(super::topic_of_key(key))?;
        Some(Duration::from_secs(u64::from(hours) * 3600))
    }

    /// How many fragments `topic` has (1 when unknown).
    pub fn fragment_count(&self, topic: &str) -> u32 {
        self.inner
            .read()
            .ok()
            .and_then(|s| s.counts.get(topic).copied())
            .unwrap_or(1)
    }

    /// The fragment stored under `key` ([`zper_store::log_key`]; a topic name is its fragment
    /// 0), if the metadata has it.
    pub fn fragment(&self, topic: &str) -> Option<FragmentView> {
        self.inner.read().ok()?.fragments.get(topic).cloned()
    }

    /// True when the applied metadata has the fragment stored under `key` (one read lock, no
    /// copy: the writer asks for every batch).
    pub fn knows(&self, key: &str) -> bool {
        self.inner
            .read()
            .is_ok_and(|s| s.fragments.contains_key(key))
    }

    /// True while this node's lease, as applied here, is current and was granted to this run
    /// of the node. A node acts as a fragment leader only then: a node cut off from the Raft
    /// group cannot renew it, so it never acknowledges writes that a newer leader's history
    /// would cut (the lease fences it; the new leader is only chosen after the lease ended);
    /// a restarted node waits for its registration, which moves what it leads to a new
    /// leader epoch (issue #13).
    pub fn lease_current(&self) -> bool {
        self.inner.read().is_ok_and(|s| s.lease_current())
    }

    /// This node's role for the fragment stored under `key` (a topic name: its fragment 0).
    /// Called for every batch the writer appends: one read lock, no copy.
    pub fn role(&self, key: &str) -> Role {
        let Ok(s) = self.inner.read() else {
            return Role::Local;
        };
        match s.fragments.get(key) {
            None => Role::Local,
            Some(f) if f.leader == self.me && !f.replicated() => Role::Local,
            Some(f) if f.leader == self.me => {
                if s.lease_current() {
                    Role::Leader {
                        epoch: f.epoch,
                        in_sync: f.isr.len(),
                        replicas: f.replicas.len(),
                    }
                } else {
                    Role::Fenced
                }
            }
            Some(f) => Role::Follower { leader: f.leader },
        }
    }

    /// Fragments (by store key) this node replicates from another leader.
    pub fn followed(&self) -> Vec<(String, FragmentView)> {
        let Ok(s) = self.inner.read() else {
            return Vec::new();
        };
        let mut out: Vec<(String, FragmentView)> = s
            .fragments
            .iter()
            .filter(|(_, f)| f.leader != self.me && f.replicas.contains(&self.me))
            .map(|(n, f)| (n.clone(), f.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Replicated fragments (by store key) this node leads (none while its lease is not
    /// current).
    pub fn led(&self) -> Vec<(String, FragmentView)> {
        if !self.lease_current() {
            return Vec::new();
        }
        let Ok(s) = self.inner.read() else {
            return Vec::new();
        };
        s.fragments
            .iter()
            .filter(|(_, f)| f.leader == self.me && f.replicated())
            .map(|(n, f)| (n.clone(), f.clone()))
            .collect()
    }

    /// A node's advertised endpoints.
    pub fn endpoints(&self, node: NodeId) -> Option<NodeEndpoints> {
        self.inner.read().ok()?.nodes.get(&node).cloned()
    }

    /// Starts the thread that keeps the view fresh until `stop`.
    pub fn spawn_refresher(
        &self,
        cluster: ClusterNode,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<JoinHandle<()>> {
        let view = self.clone();
        std::thread::Builder::new()
            .name("zper-placement".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    view.refresh(&cluster);
                    std::thread::sleep(REFRESH);
                }
            })
    }
}
