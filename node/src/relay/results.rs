//! `RESULT` (`pirius.md` §13): delivered to producers registered here whose prefix matches,
//! and passed on to every other node's relay (`RESULT-FWD`). Best effort, as in Pirius.

use std::time::Instant;

use tracing::warn;
use zper_wire::relay::{RelayReply, ResultMessage};

use super::{Relay, Sent, PEER_HWM};
use crate::metrics::Counters;

impl Relay {
    pub(super) fn deliver(&mut self, r: &ResultMessage) {
        let now = Instant::now();
        let targets: Vec<Vec<u8>> = self
            .registrations
            .iter()
            .filter(|g| g.until > now && g.topic == r.topic && r.id.starts_with(&g.prefix))
            .map(|g| g.routing_id.clone())
            .collect();
        for t in targets {
            match self.send(&t, RelayReply::Result(r.clone())) {
                Sent::Ok => Counters::add(&self.ctx.counters.relay.result_delivered, 1),
                Sent::Full => Counters::add(&self.ctx.counters.relay.result_dropped, 1),
                Sent::Gone => {
                    Counters::add(&self.ctx.counters.relay.result_dropped, 1);
                    self.registrations.retain(|g| g.routing_id != t);
                }
            }
        }
    }

    /// Passes a subscriber's result on to every other node's relay.
    pub(super) fn forward(&mut self, r: &ResultMessage) {
        let relays: Vec<String> = self
            .ctx
            .cluster
            .state
            .with_metadata(|m| {
                m.nodes
                    .values()
                    .map(|n| n.endpoints.peer_relay().to_owned())
                    .filter(|e| !e.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        for relay in relays {
            if relay == self.ctx.advertised {
                continue;
            }
            if !self.peers.contains_key(&relay) {
                match self.peer(&relay) {
                    Ok(s) => {
                        self.peers.insert(relay.clone(), s);
                    }
                    Err(e) => {
                        warn!(relay = %relay, error = %e, "cannot connect to peer relay");
                        continue;
                    }
                }
            }
            if let Some(p) = self.peers.get(&relay) {
                let frames = r.frames(zper_wire::relay::RESULT_FWD);
                if p.send_multipart(frames, zmq::DONTWAIT).is_err() {
                    Counters::add(&self.ctx.counters.relay.result_dropped, 1);
                }
            }
        }
    }

    pub(super) fn peer(&self, endpoint: &str) -> Result<zmq::Socket, zmq::Error> {
        let s = self.zctx.socket(zmq::DEALER)?;
        s.set_linger(0)?;
        s.set_sndhwm(PEER_HWM)?;
        self.ctx
            .curve
            .connect_to_peer(crate::config::CurveEndpointName::Relay, &s)?;
        s.connect(endpoint)?;
        Ok(s)
    }
}
