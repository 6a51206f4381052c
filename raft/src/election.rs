//! Fast elections after the leader's process died (issue #16).
//!
//! openraft elects only after a follower's election timeout (a random 1-2x
//! `raft.election_timeout_ms`) and its voters refuse every candidate while their leader lease
//! (2x the timeout since the leader's last heartbeat) runs, so the first candidate after a
//! leader's death is refused and a leader emerged 1-2 s after a kill -9. But when the leader's
//! *process* is gone, its followers know at once: the kernel closes the leader's
//! [`crate::transport`] connections, and its admin port then refuses connections.
//!
//! When a follower sees the current leader's stream end and a connect to the leader's admin
//! port is refused (not merely unanswered: a partitioned leader stays to the timers), every
//! surviving voter starts an election at once ([`openraft::Raft::trigger`]), which ends its
//! lease and so lets it vote again; the surviving voter with the lowest id ("rank 0") starts
//! another a few ms later, in a higher term, which the others then grant. A rank-0 voter whose
//! log is behind is refused, and the timers elect someone else as before.
//!
//! Safety is Raft's: this only starts elections earlier, it never grants a vote or skips a
//! check. Fragment leases ([`crate::metadata`]) are time based and unaffected.

use std::time::Duration;

use tokio::net::TcpStream;
use tracing::info;

use crate::{ClusterNode, NodeId};

/// Longest wait for one connect that tells a dead leader from a live one.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Connects tried, `PROBE_EVERY` apart: a killed process's connections may close before its
/// listening socket does (the kernel closes its files one by one), so one early connect can
/// still be accepted.
const PROBES: u32 = 8;
/// Between two connects.
const PROBE_EVERY: Duration = Duration::from_millis(25);
/// Between rank 0's elections: long enough for the other survivors to have started theirs.
const RANK0_RETRY: Duration = Duration::from_millis(40);
/// Elections rank 0 starts, at most.
const RANK0_TRIES: u32 = 4;

/// What a follower does once the stream from `leader` ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not the current leader, or it still answers: leave it to the timers.
    Nothing,
    /// Start `elections` elections, `RANK0_RETRY` apart.
    Elect { elections: u32 },
}

/// The decision, from this node's `rank` among the surviving voters (`None`: not a voter) and
/// whether the leader's admin port refused a connection.
pub(crate) fn verdict(still_leader: bool, refused: bool, rank: Option<usize>) -> Verdict {
    match (still_leader && refused, rank) {
        (true, Some(0)) => Verdict::Elect {
            elections: RANK0_TRIES,
        },
        (true, Some(_)) => Verdict::Elect { elections: 1 },
        _ => Verdict::Nothing,
    }
}

/// This node's position among the voters other than `dead`, by id.
pub(crate) fn rank(
    voters: impl Iterator<Item = NodeId>,
    me: NodeId,
    dead: NodeId,
) -> Option<usize> {
    let mut alive: Vec<NodeId> = voters.filter(|v| *v != dead).collect();
    alive.sort_unstable();
    alive.iter().position(|v| *v == me)
}

/// True when a connect to `addr` is refused within [`PROBE_TIMEOUT`] (nothing listens: the
/// process is gone). A connect that succeeds, times out or fails otherwise is `false`.
async fn refused(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(addr)).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

impl ClusterNode {
    /// Called when an AppendEntries stream from `from` ended: if `from` is this node's leader
    /// and its process is gone, starts the elections described in the module docs.
    pub async fn leader_stream_closed(&self, from: NodeId) {
        if from == self.id || self.leader() != Some(from) {
            return;
        }
        let (addr, rank) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            (
                membership.get_node(&from).map(|n| n.http.clone()),
                rank(membership.voter_ids(), self.id, from),
            )
        };
        let Some(addr) = addr else { return };
        let mut gone = false;
        for probe in 0..PROBES {
            if probe > 0 {
                tokio::time::sleep(PROBE_EVERY).await;
            }
            if self.leader() != Some(from) {
                return;
            }
            if refused(&addr).await {
                gone = true;
                break;
            }
        }
        let refused = gone;
        let Verdict::Elect { elections } = verdict(self.leader() == Some(from), refused, rank)
        else {
            return;
        };
        info!(leader = from, "the leader's process is gone: electing now");
        for n in 0..elections {
            if n > 0 {
                tokio::time::sleep(RANK0_RETRY).await;
                if self.leader().is_some_and(|l| l != from) {
                    return;
                }
            }
            if self.raft.trigger().elect().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_current_leader_starts_elections_and_rank_0_retries() {
        assert_eq!(
            verdict(true, true, Some(0)),
            Verdict::Elect { elections: 4 }
        );
        assert_eq!(
            verdict(true, true, Some(1)),
            Verdict::Elect { elections: 1 }
        );
        assert_eq!(verdict(true, false, Some(0)), Verdict::Nothing);
        assert_eq!(verdict(false, true, Some(0)), Verdict::Nothing);
        assert_eq!(verdict(true, true, None), Verdict::Nothing);
    }

    #[test]
    fn rank_counts_the_surviving_voters_by_id() {
        assert_eq!(rank([1, 2, 3].into_iter(), 2, 1), Some(0));
        assert_eq!(rank([1, 2, 3].into_iter(), 3, 1), Some(1));
        assert_eq!(rank([3, 1, 2].into_iter(), 1, 2), Some(0));
        assert_eq!(rank([1, 2, 3].into_iter(), 4, 1), None);
    }

    #[tokio::test]
    async fn a_closed_port_is_refused_and_a_listening_one_is_not() {
        let open = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let open_addr = open.local_addr().expect("addr").to_string();
        let closed_addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        assert!(!refused(&open_addr).await);
        assert!(refused(&closed_addr).await);
    }
}
