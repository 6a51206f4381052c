//! zper's own ZMTP engine (issue #17): TCP listeners and connections driven by `mio`, speaking
//! the handshakes and frames of [`zper_wire::zmtp`]. An endpoint loop that owns the engine sees
//! peers with their identity and a byte stream already cut into stored records, instead of one
//! libzmq message per frame.
//!
//! Bounds: a connection buffers at most its endpoint's `max_buffered` bytes of one incomplete
//! message plus one read, and at most [`connection::MAX_OUTBOUND`] bytes of replies not yet taken
//! by its TCP peer (further replies are dropped and counted by the endpoint, as a libzmq
//! ROUTER past its HWM drops them).

pub(crate) mod connection;
pub(crate) mod listener;
pub(crate) mod peers;
pub mod security;
pub(crate) mod zap;
