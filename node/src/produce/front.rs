//! The writer's front thread: owns the ROUTER, parses each producer's identity once (`zper.md`
//! §3), routes each message to its topic's worker and encodes its frames into stored records
//! (§6.2), and passes the workers' acks back to the producers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use tracing::{debug, error, warn};
use zper_wire::encode_record;

use super::{Producers, WriteBatch, BATCH_BYTES, DRAIN_MESSAGES};
use crate::endpoint::{try_send, POLL_MS};
use crate::metrics::Counters;

pub(crate) struct Front {
    pub(crate) router: zmq::Socket,
    pub(crate) acks: zmq::Socket,
    pub(crate) senders: Vec<Sender<WriteBatch>>,
    pub(crate) producers: Producers,
    pub(crate) max_message: usize,
    pub(crate) allow_empty_message: bool,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Front {
    pub(crate) fn run(mut self, workers: Vec<JoinHandle<()>>) {
        let mut batches: Vec<WriteBatch> =
            self.senders.iter().map(|_| WriteBatch::default()).collect();
        let mut frame = zmq::Message::new();
        while !self.stop.load(Ordering::Relaxed) {
            let mut items = [
                self.router.as_poll_item(zmq::POLLIN),
                self.acks.as_poll_item(zmq::POLLIN),
            ];
            if let Err(e) = zmq::poll(&mut items, POLL_MS) {
                error!(error = %e, "writer poll failed");
                break;
            }
            self.forward_acks();
            for _ in 0..DRAIN_MESSAGES {
                match self.read_message(&mut frame, &mut batches) {
                    Ok(Some(worker)) if batches[worker].bytes.len() >= BATCH_BYTES => {
                        self.dispatch(worker, &mut batches);
                    }
                    Ok(_) => {}
                    Err(zmq::Error::EAGAIN) => break,
                    Err(e) => {
                        warn!(error = %e, "writer receive failed");
                        break;
                    }
                }
            }
            for worker in 0..batches.len() {
                self.dispatch(worker, &mut batches);
            }
        }
        // Shutdown: workers flush what they hold and exit once their channel closes.
        self.senders.clear();
        for w in workers {
            let _ = w.join();
        }
        self.forward_acks();
        debug!("writer stopped");
    }

    fn dispatch(&self, worker: usize, batches: &mut [WriteBatch]) {
        if batches[worker].appends.is_empty() {
            return;
        }
        let batch = batches[worker].take();
        // Blocks when the worker is 16 batches behind: backpressure reaches the producers' TCP.
        if self.senders[worker].send(batch).is_err() {
            error!(worker, "writer worker is gone");
        }
    }

    fn forward_acks(&self) {
        while let Ok(frames) = self.acks.recv_multipart(zmq::DONTWAIT) {
            if try_send(&self.router, frames) {
                Counters::add(&self.counters.acks_sent, 1);
            } else {
                Counters::add(&self.counters.acks_dropped, 1);
            }
        }
    }

    /// Reads one whole message from the ROUTER into its worker's batch. Returns the worker, or
    /// None when the message was dropped (invalid identity, oversized frame).
    fn read_message(
        &mut self,
        frame: &mut zmq::Message,
        batches: &mut [WriteBatch],
    ) -> Result<Option<usize>, zmq::Error> {
        self.router.recv(frame, zmq::DONTWAIT)?;
        let producer = self.producers.get(frame, self.senders.len());
        let Some(producer) = producer else {
            invalid_identity(&self.counters.invalid_identity, frame);
            self.skip_rest(frame)?;
            return Ok(None);
        };
        let batch = &mut batches[producer.worker];
        let mark = batch.bytes.len();
        let mut at_start = true;
        let mut id_taken = false;
        let mut id: Vec<u8> = Vec::new();
        while self.router.get_rcvmore()? {
            self.router.recv(frame, 0)?;
            let more = self.router.get_rcvmore()?;
            if at_start && frame.is_empty() && more {
                at_start = false; // REQ envelope
                continue;
            }
            at_start = false;
            if frame.len() > self.max_message
                || (!more && frame.is_empty() && !self.allow_empty_message)
            {
                batch.bytes.truncate(mark);
                if frame.is_empty() {
                    let counter = &self.counters.empty_messages;
                    dropped(
                        counter,
                        "empty message while allow_empty_message = false",
                        &producer.routing_id,
                    );
                } else {
                    dropped(
                        &self.counters.oversized_frames,
                        "frame over max_message",
                        &producer.routing_id,
                    );
                }
                if more {
                    self.skip_rest(frame)?;
                }
                return Ok(None);
            }
            if !id_taken {
                id.extend_from_slice(frame);
                id_taken = true;
            }
            encode_record(frame, more, &mut batch.bytes);
        }
        if batch.bytes.len() == mark {
            return Ok(None); // a routing id with no data frames: nothing to store
        }
        batch.record(&producer, &id);
        Ok(Some(producer.worker))
    }

    fn skip_rest(&self, frame: &mut zmq::Message) -> Result<(), zmq::Error> {
        while self.router.get_rcvmore()? {
            self.router.recv(frame, 0)?;
        }
        Ok(())
    }
}

/// Counts a dropped message and logs it, sampled (the 1st, 2nd, 4th, 8th, ... of each kind) so a
/// flood of bad input cannot flood the log. The identity is logged as escaped ASCII
/// (`\x92\x01\x04test...`), the way the spec writes identities.
pub(super) fn dropped(counter: &std::sync::atomic::AtomicU64, why: &'static str, identity: &[u8]) {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        warn!(reason = why, identity = %identity.escape_ascii(), dropped_so_far = n, "writer dropped a message");
    }
}

/// [`dropped`] for a message whose identity is not a producer identity (spec §3): the log says
/// what is wrong with it (e.g. "topic byte 0x2d at 2 is not an ASCII letter or digit") and
/// what the layout is.
pub(super) fn invalid_identity(counter: &std::sync::atomic::AtomicU64, identity: &[u8]) {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        let what = match zper_wire::Identity::parse(identity) {
            Err(e) => e.to_string(),
            Ok(_) => "not a producer identity".to_owned(),
        };
        warn!(
            reason = "invalid producer identity",
            problem = %what,
            identity = %identity.escape_ascii(),
            expected = "[hash:1][mode:1][topic length:1][topic: 1-64 of A-Za-z0-9][uuid:16]",
            dropped_so_far = n,
            "writer dropped a message"
        );
    }
}
