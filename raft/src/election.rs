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
//! lease and so lets it vote again. Then the survivors take turns by rank (their order by id):
//! rank r starts up to [`TRIES_PER_TURN`] more elections, [`RETRY`] apart, in its own turn
//! ([`schedule`]), each in a higher term, which the others grant, until a leader is known. A
//! survivor whose log is behind is refused by the others however often it tries, so its turn
//! passes and the next rank, whose log is longer, wins in its own. A survivor stops as soon as
//! a new leader is known, and lets one try pass when its vote is another's ([`next_step`]): a
//! fresh leader is not unseated by a late election. (Before the turns, rank 0 alone retried, whether or not
//! it had voted for another: CI saw a cluster leaderless for 5 s after its leader's shutdown and
//! a fragment leader's lease lapse; a rank 0 whose log is behind would also have waited for the
//! timers, which openraft lengthens for a node that saw a longer log.)
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
/// Between two elections of one survivor in its turn: long enough for the others to have
/// answered the last one.
const RETRY: Duration = Duration::from_millis(40);
/// Elections one survivor starts in its turn, at most.
const TRIES_PER_TURN: u32 = 4;

/// What a follower does once the stream from its leader ended, from its `rank` among the
/// surviving voters (`None`: not a voter) and whether the leader's admin port refused a
/// connection: `Some(rank)` starts elections at the times of [`schedule`] for that rank;
/// `None` (not the current leader, or it still answers) leaves it to the timers.
pub(crate) fn verdict(still_leader: bool, refused: bool, rank: Option<usize>) -> Option<usize> {
    rank.filter(|_| still_leader && refused)
}

/// When the survivor of `rank` starts its elections, after the leader's death was seen: at
/// once (every survivor, to end its lease), then [`TRIES_PER_TURN`] times, [`RETRY`] apart, in
/// its turn, which begins `rank` turns after the first (rank 0's turn begins at once, so its
/// first election is also its turn's first). Ascending.
pub(crate) fn schedule(rank: usize) -> Vec<Duration> {
    let turn = RETRY * TRIES_PER_TURN * rank as u32;
    let mut at = vec![Duration::ZERO];
    let first = if rank == 0 { 1 } else { 0 };
    at.extend((first..TRIES_PER_TURN).map(|k| turn + RETRY * k));
    at
}

/// What a survivor does at its next try.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Start an election.
    Elect,
    /// Let this try pass: its vote went to another candidate, who may be winning.
    Wait,
    /// A new leader is known: the turn is over.
    Stop,
}

/// A survivor's next try, from the leader it knows (`leader`), its vote (`term`, `voted_for`),
/// its own id, the dead leader's, and the vote it let a try pass for (`waited`, updated here).
///
/// It stops once a new leader is known. When its vote is another survivor's, it lets one try
/// pass: if that vote was granted, the candidate is about to win, and an election now would
/// unseat it (a fresh leader's AppendEntries are refused by a voter in a higher term). But a
/// vote is also taken over, ungranted, from a refusal in a higher term: if the same vote still
/// stands a try later with no leader known, the candidate did not win, and it elects. (Helper
/// attack: stopping for good at such a vote left a survivor whose log was longer to the timers,
/// 3.5-6.9 s leaderless, when the lowest-id survivor's log was behind.)
pub(crate) fn next_step(
    leader: Option<NodeId>,
    vote: (u64, Option<NodeId>),
    me: NodeId,
    dead: NodeId,
    waited: &mut Option<(u64, NodeId)>,
) -> Step {
    if leader.is_some_and(|l| l != dead) {
        return Step::Stop;
    }
    match vote {
        (term, Some(v)) if v != me && v != dead => {
            if *waited == Some((term, v)) {
                Step::Elect
            } else {
                *waited = Some((term, v));
                Step::Wait
            }
        }
        _ => Step::Elect,
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
        let Some(rank) = verdict(self.leader() == Some(from), gone, rank) else {
            return;
        };
        info!(
            leader = from,
            rank, "the leader's process is gone: electing now"
        );
        let start = tokio::time::Instant::now();
        let mut waited = None;
        for (n, at) in schedule(rank).into_iter().enumerate() {
            if n > 0 {
                tokio::time::sleep_until(start + at).await;
                let (leader, vote) = {
                    let m = self.raft.metrics();
                    let m = m.borrow();
                    let id = m.vote.leader_id();
                    (m.current_leader, (id.term, id.voted_for()))
                };
                match next_step(leader, vote, self.id, from, &mut waited) {
                    Step::Stop => return,
                    Step::Wait => continue,
                    Step::Elect => {}
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
    fn only_a_refused_current_leader_starts_elections() {
        assert_eq!(verdict(true, true, Some(0)), Some(0));
        assert_eq!(verdict(true, true, Some(1)), Some(1));
        assert_eq!(verdict(true, false, Some(0)), None);
        assert_eq!(verdict(false, true, Some(0)), None);
        assert_eq!(verdict(true, true, None), None);
    }

    #[test]
    fn every_survivor_elects_at_once_then_in_its_own_turn() {
        let ms = |rank| -> Vec<u128> { schedule(rank).iter().map(Duration::as_millis).collect() };
        assert_eq!(ms(0), [0, 40, 80, 120]);
        assert_eq!(ms(1), [0, 160, 200, 240, 280]);
        assert_eq!(ms(2), [0, 320, 360, 400, 440]);
        // Turns do not overlap: rank r's last election comes before rank r+1's turn.
        for r in 0..4 {
            let (this, next) = (schedule(r), schedule(r + 1));
            assert!(this.last() < next.get(1), "rank {r}");
        }
    }

    #[test]
    fn a_survivor_stops_at_a_new_leader_and_waits_one_try_for_a_candidate_it_voted_for() {
        // me = 1, dead = 2.
        let mut waited = None;
        assert_eq!(
            next_step(Some(2), (5, Some(2)), 1, 2, &mut waited),
            Step::Elect
        );
        assert_eq!(
            next_step(None, (6, Some(1)), 1, 2, &mut waited),
            Step::Elect
        );
        assert_eq!(next_step(None, (6, None), 1, 2, &mut waited), Step::Elect);
        assert_eq!(
            next_step(Some(3), (6, Some(1)), 1, 2, &mut waited),
            Step::Stop
        );
        assert_eq!(
            next_step(Some(1), (6, Some(1)), 1, 2, &mut waited),
            Step::Stop
        );
        // Its vote went to 3 in term 7: one try passes; the same vote a try later, with no
        // leader known, means 3 did not win.
        assert_eq!(next_step(None, (7, Some(3)), 1, 2, &mut waited), Step::Wait);
        assert_eq!(
            next_step(None, (7, Some(3)), 1, 2, &mut waited),
            Step::Elect
        );
        // A vote in a newer term is waited for again; 3 winning ends the turn.
        assert_eq!(next_step(None, (9, Some(3)), 1, 2, &mut waited), Step::Wait);
        assert_eq!(
            next_step(Some(3), (9, Some(3)), 1, 2, &mut waited),
            Step::Stop
        );
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
