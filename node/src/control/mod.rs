//! The control endpoints: the controller ROUTER (cluster information and subscriptions, spec
//! `zper.md` §9), the ack PUB (flush notices, §8) and the socket monitor that counts every
//! endpoint's connections.

pub mod ack;
pub mod controller;
pub(crate) mod monitor;
