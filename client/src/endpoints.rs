//! Where a node listens, and the identity a ZPER client presents (spec `zper.md` §3).

use zper_wire::{endpoint, Identity};

use crate::ClientError;

/// A node's client-facing endpoints: ZeroMQ endpoints `tcp://host:port`, the admin address
/// `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Writer ROUTER (`zper.md` §4).
    pub writer: String,
    /// Reader ROUTER (§5).
    pub reader: String,
    /// HTTP admin address, `host:port`.
    pub admin: String,
    /// The admin token sent with mutating admin requests, if the node has one.
    pub admin_token: Option<String>,
    /// CA certificates (a PEM file) of an admin API served over TLS (`http.tls_ca`); None:
    /// plain HTTP.
    pub admin_ca: Option<std::path::PathBuf>,
    /// Dolly requests ROUTER (`dolly.md` §6).
    pub dolly: String,
    /// Controller ROUTER (§9).
    pub controller: String,
    /// CURVE keys for a writer and reader that require CURVE (issue #19); `None`: plain.
    pub curve: Option<crate::ClientCurve>,
}

impl Endpoints {
    /// A node on this machine on the default ports (5555, 5556, 9644, 3266, 5558).
    pub fn local() -> Self {
        Endpoints {
            writer: endpoint::WRITER.local(),
            reader: endpoint::READER.local(),
            admin: endpoint::HTTP.local(),
            admin_token: None,
            admin_ca: None,
            dolly: endpoint::DOLLY_REQUESTS.local(),
            controller: endpoint::CONTROLLER.local(),
            curve: None,
        }
    }
}

/// A bind endpoint turned into one a local client can connect to (`*` and `0.0.0.0` become
/// 127.0.0.1).
pub fn connectable(bind: &str) -> String {
    bind.replace("://*:", "://127.0.0.1:")
        .replace("://0.0.0.0:", "://127.0.0.1:")
}

/// Accepts `tcp://host:port` or the original tools' `host:port`.
pub fn endpoint(s: &str) -> String {
    if s.contains("://") {
        s.to_owned()
    } else {
        format!("tcp://{s}")
    }
}

/// A fresh random 16-byte UUID for an identity (spec §3), version 4.
pub fn random_uuid() -> [u8; 16] {
    uuid::Uuid::new_v4().into_bytes()
}

/// The identity bytes a ZPER client uses for `topic` in `mode` (0, 1 or 2), with a fresh UUID.
///
/// Errors: [`ClientError::Invalid`] for a topic ZPER does not accept.
pub fn identity(topic: &str, mode: u8) -> Result<Vec<u8>, ClientError> {
    Ok(Identity::new(topic, mode, &random_uuid())
        .map_err(|e| ClientError::Invalid(format!("topic {topic:?}: {e}")))?
        .to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_accept_both_spellings_and_binds_become_local() {
        assert_eq!(endpoint("h:1"), "tcp://h:1");
        assert_eq!(endpoint("tcp://h:1"), "tcp://h:1");
        assert_eq!(connectable("tcp://*:5555"), "tcp://127.0.0.1:5555");
        assert_eq!(connectable("tcp://0.0.0.0:5556"), "tcp://127.0.0.1:5556");
        assert_eq!(connectable("tcp://10.0.0.1:5556"), "tcp://10.0.0.1:5556");
    }

    #[test]
    fn identities_carry_topic_and_mode_and_a_fresh_uuid() {
        let a = identity("orders", 1).expect("valid topic");
        let b = identity("orders", 1).expect("valid topic");
        assert_ne!(a, b, "a fresh UUID each time");
        let parsed = Identity::parse(&a).expect("parses");
        assert_eq!((parsed.topic.as_str(), parsed.mode), ("orders", 1));
        assert!(matches!(
            identity("bad topic!", 0),
            Err(ClientError::Invalid(_))
        ));
    }
}
