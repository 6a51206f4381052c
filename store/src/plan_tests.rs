//! The one-walk plan gives exactly what the three walks it replaced gave: the same rotation
//! points, index entries and checksum pieces.

use super::*;
use proptest::prelude::*;
use zper_wire::encode_record;

/// The old append path, walk by walk: message ends, a cut after the message that passes
/// `segment_size`, then per chunk every record start noted STRIDE apart and pieces cut at
/// message ends at least PIECE apart (not at the chunk's end).
fn oracle(records: &[u8], start: Start) -> Result<Vec<Chunk>, usize> {
    let mut ends = Vec::new();
    let mut pos = 0usize;
    let mut it = Records::new(records);
    for rec in it.by_ref() {
        pos += rec.stored_len();
        if !rec.more {
            ends.push(pos);
        }
    }
    if it.message_bytes() != records.len() {
        return Err(it.message_bytes());
    }
    let mut spans = Vec::new();
    let (mut from, mut count, mut seg_start) = (0usize, 0u64, start.segment_start);
    for end in ends {
        count += 1;
        if start.at + end as u64 - seg_start > start.segment_size {
            spans.push((from..end, count, true));
            seg_start = start.at + end as u64;
            (from, count) = (end, 0);
        }
    }
    if from < records.len() {
        spans.push((from..records.len(), count, false));
    }
    let mut last = start.last_indexed;
    let mut out = Vec::new();
    for (range, messages, rotate_after) in spans {
        let chunk = &records[range.clone()];
        let mut index = Vec::new();
        let mut p = 0usize;
        for rec in Records::new(chunk) {
            let abs = start.at + (range.start + p) as u64;
            if last.is_none_or(|l| abs >= l + STRIDE) {
                index.push(abs);
                last = Some(abs);
            }
            p += rec.stored_len();
        }
        let mut pieces = Vec::new();
        let (mut p, mut from) = (0usize, 0usize);
        for rec in Records::new(chunk) {
            p += rec.stored_len();
            if !rec.more && p - from >= PIECE && p < chunk.len() {
                pieces.push(p);
                from = p;
            }
        }
        if rotate_after {
            last = Some(start.at + range.end as u64);
        }
        out.push(Chunk {
            range,
            messages,
            index,
            pieces,
            rotate_after,
        });
    }
    Ok(out)
}

fn records(messages: &[(u8, usize)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(frames, size) in messages {
        for f in 0..frames {
            encode_record(&vec![b'm'; size], f + 1 < frames, &mut out);
        }
    }
    out
}

#[test]
fn a_batch_that_fills_segments_is_cut_after_the_message_that_passes_the_size() {
    let bytes = records(&[(1, 998); 30]);
    let len = bytes.len() / 30; // 998 + a 9-byte long header
    assert_eq!(len, 1007);
    let start = Start {
        at: 5000,
        segment_start: 0,
        last_indexed: Some(4096),
        segment_size: 10_000,
    };
    let chunks = plan(&bytes, start).expect("whole");
    // 5000 + 5 messages = 10035 > 10000: the first chunk ends after the fifth message; the
    // next segments take 10 messages each (10070 > 10000).
    assert_eq!(chunks[0].range, 0..5 * len);
    assert!(chunks[0].rotate_after);
    assert_eq!(chunks[1].range, 5 * len..15 * len);
    // The new segment's index starts at its start (10035); the next entry is the first record
    // start 4096 bytes past it.
    assert_eq!(chunks[1].index.first(), Some(&(10_035 + 5 * 1007)));
    assert_eq!(chunks.last().map(|c| c.rotate_after), Some(false));
    assert_eq!(chunks.iter().map(|c| c.messages).sum::<u64>(), 30);
    assert_eq!(plan(&bytes, start), oracle(&bytes, start));
}

#[test]
fn a_torn_batch_is_refused_with_its_whole_part() {
    let mut bytes = records(&[(2, 10), (1, 5)]);
    let whole = bytes.len();
    bytes.extend_from_slice(&records(&[(2, 10)])[..14]);
    let start = Start {
        at: 0,
        segment_start: 0,
        last_indexed: Some(0),
        segment_size: 1 << 20,
    };
    assert_eq!(plan(&bytes, start), Err(whole));
    assert_eq!(plan(&[], start), Ok(Vec::new()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_plan_matches_the_three_walks_it_replaced(
        messages in prop::collection::vec((1u8..4, prop_oneof![0usize..300, 200usize..70_000]), 0..80),
        at in 0u64..50_000,
        back in 0u64..50_000,
        indexed_back in prop::option::of(0u64..8192),
        segment_size in prop_oneof![Just(u64::MAX), 1u64..200_000],
        torn in 0usize..20,
    ) {
        let mut bytes = records(&messages);
        if torn > 0 && !bytes.is_empty() {
            bytes.truncate(bytes.len().saturating_sub(torn));
        }
        let start = Start {
            at,
            segment_start: at.saturating_sub(back),
            last_indexed: indexed_back.map(|b| at.saturating_sub(b)),
            segment_size,
        };
        prop_assert_eq!(plan(&bytes, start), oracle(&bytes, start));
    }
}
