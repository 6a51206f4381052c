//! What a copy of the workload's topic holds: its messages' ids and offsets, read from the
//! stored records (`zper.md` §4's record format, through [`zper_wire::Records`]).

use zper_wire::Records;

/// (message id, offset) of every message in a log, in order.
pub(crate) fn messages(log: &[u8]) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut records = Records::new(log);
    let mut start = 0;
    let mut first: Option<u64> = None;
    while let Some(r) = records.next() {
        if first.is_none() {
            first = <[u8; 8]>::try_from(r.payload).ok().map(u64::from_be_bytes);
        }
        if !r.more {
            if let Some(id) = first.take() {
                out.push((id, start));
            }
            start = records.valid_bytes();
        }
    }
    out
}

/// The idempotent messages of a log: ((producer id, sequence), payload id), in log order.
pub(crate) fn idempotent_messages(log: &[u8]) -> Vec<(([u8; 16], u64), u64)> {
    let mut out = Vec::new();
    let mut frames: Vec<&[u8]> = Vec::new();
    for r in Records::new(log) {
        frames.push(r.payload);
        if !r.more {
            if let [id, payload] = frames[..] {
                let id = zper_client::MessageId::from_bytes(id);
                let payload = <[u8; 8]>::try_from(payload).ok().map(u64::from_be_bytes);
                if let (Some(id), Some(payload)) = (id, payload) {
                    out.push(((id.producer, id.sequence), payload));
                }
            }
            frames.clear();
        }
    }
    out
}
