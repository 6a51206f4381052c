//! The decisions behind a leader's high-water mark, without sockets (issue #14's pure cores;
//! issue #13's rules): whose reports count ([`Progress`]), where the mark moves next
//! ([`next_high_water`]) and how far a replica's log may go before it cuts back
//! ([`replica_limit`], Kafka KIP-101 / KIP-279). `leader.rs` receives the fetches and calls
//! these.

use std::collections::HashMap;

use zper_raft::NodeId;

/// Per led topic: each replica's last reported durable offset in the leader epoch `epoch`.
/// Reports from an earlier epoch in which this node also led are forgotten: the replica may
/// have truncated since, so they may name bytes it no longer holds (issue #13).
#[derive(Default)]
pub(crate) struct Progress {
    epoch: u64,
    durable: HashMap<NodeId, u64>,
}

impl Progress {
    /// The reports of `epoch` (empty when they are from another one).
    pub(crate) fn of_epoch(&mut self, epoch: u64) -> &mut HashMap<NodeId, u64> {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.durable.clear();
        }
        &mut self.durable
    }

    /// `replica`'s durable offset reported in `epoch`.
    pub(crate) fn durable_in(&self, epoch: u64, replica: NodeId) -> Option<u64> {
        (self.epoch == epoch)
            .then(|| self.durable.get(&replica).copied())
            .flatten()
    }
}

/// How far a replica's log may go before it must cut back (pure; Kafka KIP-101 / KIP-279),
/// given this leader's epoch `history` (`(epoch, start offset)`, ascending), its `written`
/// end, and the replica's newest epoch `last_epoch` starting at `last_start` in its log.
///
/// The end of that epoch here: the start of the first newer epoch, or the written end. When
/// this history lacks the replica's epoch altogether, the replica wrote it as a leader whose
/// writes never reached this one, so everything it holds from that epoch's start differs
/// from what is here: the limit is also at most `last_start` (issue #13: before this rule a
/// former leader kept its own unacknowledged messages in the middle of its log, under
/// acknowledged ones of the same size everywhere else, and nobody truncated).
pub(crate) fn replica_limit(
    history: &[(u64, u64)],
    written: u64,
    last_epoch: Option<u64>,
    last_start: Option<u64>,
) -> u64 {
    let end = match last_epoch {
        None => history.first().map_or(0, |(_, s)| *s),
        Some(e) => history
            .iter()
            .find(|(x, _)| *x > e)
            .map_or(written, |(_, s)| *s),
    };
    let unknown = last_epoch.is_some_and(|e| history.iter().all(|(x, _)| *x != e));
    match last_start {
        Some(start) if unknown => end.min(start).min(written),
        _ => end.min(written),
    }
}

/// Where a leader's high-water mark moves next (pure; issue #13): the lowest durable offset
/// over the in-sync replicas `isr` (`durable` gives each one's, `None` for a replica that has
/// not reported), when that is past `current`. `None` (the mark stands still) while fewer
/// than `needed` replicas are in sync (`min_insync`), while an in-sync replica has not
/// reported, or when the lowest is not past `current` (the mark never moves backwards).
pub(crate) fn next_high_water(
    isr: &[NodeId],
    durable: impl Fn(NodeId) -> Option<u64>,
    needed: usize,
    current: Option<u64>,
) -> Option<u64> {
    if isr.len() < needed.max(1) {
        return None;
    }
    let lowest = isr
        .iter()
        .try_fold(u64::MAX, |acc, r| durable(*r).map(|d| acc.min(d)))?;
    current.is_none_or(|c| lowest > c).then_some(lowest)
}

#[cfg(test)]
mod tests {
    use super::{next_high_water, replica_limit, Progress};

    #[test]
    fn a_replica_holding_an_epoch_this_leader_never_had_cuts_back_to_where_it_starts() {
        // Seen in the rolling-restart chaos run: node B led epoch 4 and wrote up to 1000, of
        // which node A had 700. A led epoch 5 from 700 and wrote 340 bytes nobody else got.
        // B leads again in epoch 6 from 1000. A asks from 1040 with its epoch 5 starting at
        // 700. B's history has no epoch 5: A's bytes in [700, 1040) are not B's.
        let b = [(0, 0), (4, 200), (6, 1000)];
        assert_eq!(replica_limit(&b, 1500, Some(5), Some(700)), 700);
        // Without where A's epoch starts (an older node), only KIP-101's limit holds.
        assert_eq!(replica_limit(&b, 1500, Some(5), None), 1000);
        // An epoch this leader has: the start of the next one, as before.
        assert_eq!(replica_limit(&b, 1500, Some(4), Some(200)), 1000);
        assert_eq!(replica_limit(&b, 1500, Some(6), Some(1000)), 1500);
        assert_eq!(replica_limit(&b, 1500, None, None), 0);
        assert_eq!(replica_limit(&[], 0, None, None), 0);
    }

    #[test]
    fn reports_from_an_earlier_epoch_do_not_move_the_mark() {
        // Led in epoch 3, replica 2 reported 1000; it then followed another leader and was
        // cut back. Leading again in epoch 5, its old report must not count.
        let mut p = Progress::default();
        p.of_epoch(3).insert(2, 1_000);
        assert_eq!(p.durable_in(3, 2), Some(1_000));
        assert_eq!(p.durable_in(5, 2), None);
        let durable = |r: u64| {
            if r == 1 {
                Some(1_500)
            } else {
                p.durable_in(5, r)
            }
        };
        assert_eq!(next_high_water(&[1, 2], durable, 2, Some(0)), None);
        p.of_epoch(5).insert(2, 900);
        assert_eq!(p.durable_in(5, 2), Some(900));
        assert_eq!(p.durable_in(3, 2), None, "the old epoch's reports are gone");
    }

    #[test]
    fn the_mark_is_the_lowest_durable_offset_over_the_isr_and_never_goes_back() {
        let durable = |r: u64| Some([0, 500, 300, 900][r as usize]);
        assert_eq!(
            next_high_water(&[1, 2, 3], durable, 2, Some(100)),
            Some(300)
        );
        assert_eq!(next_high_water(&[1, 3], durable, 2, Some(100)), Some(500));
        assert_eq!(
            next_high_water(&[1, 2], durable, 2, Some(300)),
            None,
            "not past"
        );
        assert_eq!(
            next_high_water(&[1, 2], durable, 2, Some(400)),
            None,
            "never back"
        );
        assert_eq!(next_high_water(&[1, 2], durable, 2, None), Some(300));
    }

    #[test]
    fn the_mark_stands_still_below_min_insync() {
        // Issue #13: the ISR shrank to the leader; what only it holds is not safe.
        let durable = |_| Some(1_000);
        assert_eq!(next_high_water(&[1], durable, 2, Some(10)), None);
        assert_eq!(next_high_water(&[], durable, 1, Some(10)), None);
        assert_eq!(next_high_water(&[1], durable, 1, Some(10)), Some(1_000));
        assert_eq!(next_high_water(&[1, 2], durable, 3, Some(10)), None);
    }

    #[test]
    fn an_in_sync_replica_that_has_not_reported_holds_the_mark() {
        let durable = |r: u64| (r != 2).then_some(1_000);
        assert_eq!(next_high_water(&[1, 2, 3], durable, 2, Some(10)), None);
    }
}
