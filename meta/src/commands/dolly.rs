//! Dolly commands (issue #5): [`Command::DollyPut`] (at most once per request id, never after
//! its cancel), [`Command::DollyCancel`] and [`Command::SetDollyLeader`].
//!
//! [`Command::DollyPut`]: crate::Command::DollyPut
//! [`Command::DollyCancel`]: crate::Command::DollyCancel
//! [`Command::SetDollyLeader`]: crate::Command::SetDollyLeader

use crate::{
    Applied, CommandResult, DollyOutcome, DollyRecord, DollyRequest, Metadata, MetadataError,
    NodeId, DOLLY_REQUEST_RETAIN_MS,
};

impl Metadata {
    /// `key` takes `value` with sequence `index` (or the next one): once per `request`.
    pub(super) fn apply_dolly_put(
        &mut self,
        key: &[u8],
        value: &[u8],
        request: Option<&DollyRequest>,
        deadline_ms: u64,
        index: u64,
    ) -> CommandResult {
        if let Some(r) = request {
            // Looked up before pruning: a refused Put changes nothing.
            match self.dolly_outcome(r) {
                Some(DollyOutcome {
                    sequence: Some(sequence),
                    ..
                }) => return Ok(Applied::DollyPut { sequence }),
                Some(DollyOutcome { sequence: None, .. }) => {
                    return Err(MetadataError::DollyPutCancelled)
                }
                None => {}
            }
        }
        if request.is_some() {
            self.prune_dolly_requests(deadline_ms);
        }
        let sequence = index.max(self.dolly_sequence + 1);
        self.dolly.insert(
            key.to_vec(),
            DollyRecord {
                sequence,
                value: value.to_vec(),
            },
        );
        self.dolly_sequence = sequence;
        if let Some(r) = request {
            self.dolly_requests.entry(r.origin).or_default().insert(
                r.serial,
                DollyOutcome {
                    deadline_ms,
                    sequence: Some(sequence),
                },
            );
        }
        Ok(Applied::DollyPut { sequence })
    }

    /// Gives up the Put of `request`: answers its sequence if it applied, else cancels it.
    pub(super) fn apply_dolly_cancel(
        &mut self,
        request: &DollyRequest,
        now_ms: u64,
    ) -> CommandResult {
        self.prune_dolly_requests(now_ms);
        match self.dolly_outcome(request) {
            Some(DollyOutcome {
                sequence: Some(sequence),
                ..
            }) => Ok(Applied::DollyPut { sequence }),
            Some(DollyOutcome { sequence: None, .. }) => Ok(Applied::DollyCancelled),
            None => {
                self.dolly_requests
                    .entry(request.origin)
                    .or_default()
                    .insert(
                        request.serial,
                        DollyOutcome {
                            deadline_ms: now_ms,
                            sequence: None,
                        },
                    );
                Ok(Applied::DollyCancelled)
            }
        }
    }

    /// Records the Dolly leader (a registered node).
    pub(super) fn apply_set_dolly_leader(&mut self, id: NodeId) -> CommandResult {
        if !self.nodes.contains_key(&id) {
            return Err(MetadataError::UnknownNode(id));
        }
        self.dolly_leader = Some(id);
        Ok(Applied::Done)
    }

    fn dolly_outcome(&self, r: &DollyRequest) -> Option<DollyOutcome> {
        self.dolly_requests
            .get(&r.origin)
            .and_then(|m| m.get(&r.serial))
            .copied()
    }

    /// Drops request outcomes whose deadline is more than [`DOLLY_REQUEST_RETAIN_MS`] before
    /// `clock_ms` (a clock carried in the applying command, so every node drops the same).
    /// Serials grow with time per origin, so each origin's map is trimmed from its front.
    fn prune_dolly_requests(&mut self, clock_ms: u64) {
        let horizon = clock_ms.saturating_sub(DOLLY_REQUEST_RETAIN_MS);
        for outcomes in self.dolly_requests.values_mut() {
            while let Some(entry) = outcomes.first_entry() {
                if entry.get().deadline_ms >= horizon {
                    break;
                }
                entry.remove();
            }
        }
        self.dolly_requests.retain(|_, m| !m.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use crate::{Applied, Command, DollyRequest, Metadata, MetadataError, DOLLY_REQUEST_RETAIN_MS};

    #[test]
    fn dolly_puts_take_the_raft_index_as_a_strictly_increasing_sequence() {
        let mut m = Metadata::default();
        let put = |k: &[u8], v: &[u8]| Command::DollyPut {
            key: k.to_vec(),
            value: v.to_vec(),
            request: None,
            deadline_ms: 0,
        };
        assert_eq!(
            m.apply_at(&put(b"color", b"blue"), 7),
            Ok(Applied::DollyPut { sequence: 7 })
        );
        assert_eq!(
            m.apply_at(&put(b"empty", b""), 12),
            Ok(Applied::DollyPut { sequence: 12 })
        );
        assert_eq!(
            m.apply_at(&put(b"color", b"red"), 13),
            Ok(Applied::DollyPut { sequence: 13 })
        );
        assert_eq!(m.dolly[&b"color".to_vec()].value, b"red");
        assert_eq!(m.dolly[&b"color".to_vec()].sequence, 13);
        assert_eq!(m.dolly[&b"empty".to_vec()].sequence, 12);
        assert_eq!(m.dolly_sequence, 13);
        // Never backwards, whatever index it is given.
        assert_eq!(
            m.apply(&put(b"x", b"1")),
            Ok(Applied::DollyPut { sequence: 14 })
        );
    }

    /// Issue #16: Puts sharing one entry (a batch) take consecutive sequences from its index,
    /// and the next entry goes on from there; a batch in a batch is refused alone.
    #[test]
    fn puts_in_one_batch_take_consecutive_sequences_and_nested_batches_are_refused() {
        let mut m = Metadata::default();
        let put = |k: &[u8]| Command::DollyPut {
            key: k.to_vec(),
            value: b"v".to_vec(),
            request: None,
            deadline_ms: 0,
        };
        let batch = Command::Batch(vec![
            put(b"a"),
            Command::Batch(vec![put(b"nested")]),
            put(b"b"),
            put(b"a"),
        ]);
        assert_eq!(
            m.apply_at(&batch, 20),
            Ok(Applied::Batch(vec![
                Ok(Applied::DollyPut { sequence: 20 }),
                Err(MetadataError::NestedBatch),
                Ok(Applied::DollyPut { sequence: 21 }),
                Ok(Applied::DollyPut { sequence: 22 }),
            ]))
        );
        assert!(!m.dolly.contains_key(b"nested".as_slice()));
        assert_eq!(m.dolly[&b"a".to_vec()].sequence, 22);
        assert_eq!(
            m.apply_at(&put(b"c"), 21),
            Ok(Applied::DollyPut { sequence: 23 })
        );
    }

    fn guarded_put(serial: u64, key: &[u8], deadline_ms: u64) -> Command {
        Command::DollyPut {
            key: key.to_vec(),
            value: format!("v{serial}").into_bytes(),
            request: Some(DollyRequest { origin: 2, serial }),
            deadline_ms,
        }
    }

    fn cancel(serial: u64, now_ms: u64) -> Command {
        Command::DollyCancel {
            request: DollyRequest { origin: 2, serial },
            now_ms,
        }
    }

    #[test]
    fn a_repeated_dolly_put_applies_once_and_a_cancel_tells_what_happened() {
        let mut m = Metadata::default();
        // A forwarded Put retried after a lost reply: the second copy answers the first
        // sequence and writes nothing.
        assert_eq!(
            m.apply_at(&guarded_put(1, b"k", 5_000), 10),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        let before = m.clone();
        assert_eq!(
            m.apply_at(&guarded_put(1, b"k", 5_000), 11),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        assert_eq!(m.dolly, before.dolly);
        assert_eq!(m.dolly_sequence, 10);
        // A cancel after the Put applied reports its sequence (the client gets a success).
        assert_eq!(
            m.apply_at(&cancel(1, 6_000), 12),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        // A cancel first: the Put, arriving later, never applies.
        assert_eq!(
            m.apply_at(&cancel(2, 6_000), 13),
            Ok(Applied::DollyCancelled)
        );
        let before = m.clone();
        assert_eq!(
            m.apply_at(&guarded_put(2, b"late", 5_500), 14),
            Err(MetadataError::DollyPutCancelled)
        );
        assert_eq!(m, before);
        assert!(!m.dolly.contains_key(b"late".as_slice()));
        // Cancelling twice is answered the same.
        assert_eq!(
            m.apply_at(&cancel(2, 6_100), 15),
            Ok(Applied::DollyCancelled)
        );
    }

    #[test]
    fn dolly_request_outcomes_are_dropped_a_minute_after_their_deadline() {
        let mut m = Metadata::default();
        m.apply_at(&guarded_put(1, b"a", 1_000), 1).expect("put");
        m.apply_at(&cancel(2, 2_000), 2).expect("cancel");
        assert_eq!(m.dolly_requests[&2].len(), 2);
        // A command whose clock is within the retention keeps both.
        m.apply_at(&guarded_put(3, b"b", 1_000 + DOLLY_REQUEST_RETAIN_MS), 3)
            .expect("put");
        assert_eq!(m.dolly_requests[&2].len(), 3);
        // Past it, the old ones go (in order), the values stay.
        m.apply_at(&guarded_put(4, b"c", 2_001 + DOLLY_REQUEST_RETAIN_MS), 4)
            .expect("put");
        assert_eq!(
            m.dolly_requests[&2].keys().copied().collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(m.dolly[&b"a".to_vec()].value, b"v1");
    }

    #[test]
    fn metadata_with_dolly_keys_round_trips_through_json_and_changes_the_hash() {
        let mut m = Metadata::default();
        let empty_hash = m.state_hash();
        m.apply_at(&guarded_put(1, b"\x00bin\xff", 9_000), 3)
            .expect("put");
        m.apply_at(&cancel(2, 9_000), 4).expect("cancel");
        let json = serde_json::to_vec(&m).expect("a Dolly map serializes");
        let back: Metadata = serde_json::from_slice(&json).expect("and parses back");
        assert_eq!(back, m);
        assert_ne!(m.state_hash(), empty_hash);
    }
}
