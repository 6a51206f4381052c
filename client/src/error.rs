//! What can go wrong talking to a node, as one typed error.

use thiserror::Error;
use zper_wire::Status;

/// A client-side failure.
#[derive(Debug, Error)]
pub enum ClientError {
    /// libzmq refused an operation (`what` says which, `endpoint` where).
    #[error("{what} {endpoint}: {source}")]
    Zmq {
        /// The operation, e.g. "connect to writer".
        what: &'static str,
        /// The endpoint.
        endpoint: String,
        /// libzmq's error.
        source: zmq::Error,
    },
    /// A message could not be queued to any live connection within the timeout.
    #[error("writer {endpoint} not reachable within {timeout_ms} ms")]
    Unreachable {
        /// The endpoint(s).
        endpoint: String,
        /// The timeout, ms.
        timeout_ms: u64,
    },
    /// No reply (or ack) came within the timeout.
    #[error("no reply from {endpoint} (timed out after {timeout_ms} ms)")]
    Timeout {
        /// The endpoint(s).
        endpoint: String,
        /// The timeout, ms.
        timeout_ms: u64,
    },
    /// The node refused the message with a status frame; nothing was stored.
    #[error("message refused: {}", describe(*status))]
    Refused {
        /// The id (first frame) of the refused message.
        id: Vec<u8>,
        /// The status byte (see [`Status`]).
        status: u8,
    },
    /// A reply that does not follow the protocol.
    #[error("malformed reply from {endpoint}: {detail}")]
    Malformed {
        /// The endpoint.
        endpoint: String,
        /// What was wrong (the frames, shortened).
        detail: String,
    },
    /// A request the client cannot even send (an invalid topic, bad arguments).
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    /// The status of a [`ClientError::Refused`], if it is a known one.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Refused { status, .. } => Status::from_byte(*status),
            _ => None,
        }
    }

    /// A `Zmq` error builder for `map_err`.
    pub(crate) fn zmq(what: &'static str, endpoint: &str) -> impl FnOnce(zmq::Error) -> Self {
        let endpoint = endpoint.to_owned();
        move |source| ClientError::Zmq {
            what,
            endpoint,
            source,
        }
    }
}

fn describe(status: u8) -> String {
    match Status::from_byte(status) {
        Some(s) => s.to_string(),
        None => format!("status {status}"),
    }
}

/// Why subscribing failed.
#[derive(Debug, Error)]
pub enum SubscriberError {
    /// A socket could not be made or used.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// No controller answered in time.
    #[error("no answer from the controller within {0:?}")]
    Timeout(std::time::Duration),
    /// The controller refused: 101 unknown topic or not a member, 102 malformed, 0xFF the
    /// metadata could not be written.
    #[error("the controller answered status {status} ({})", describe_subscribe(*.status))]
    Refused {
        /// The status byte.
        status: u8,
    },
}

fn describe_subscribe(status: u8) -> &'static str {
    match status {
        101 => "unknown topic, or not a member",
        102 => "malformed request: topic, group or id invalid",
        0xFF => "the cluster metadata could not be written; retry",
        _ => "unexpected status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_their_meaning_and_byte() {
        let e = ClientError::Refused {
            id: b"7".to_vec(),
            status: 103,
        };
        assert_eq!(e.status(), Some(Status::NotEnoughReplicas));
        let text = e.to_string();
        assert!(
            text.contains("min_insync") && text.contains("status 103"),
            "{text}"
        );
        let unknown = ClientError::Refused {
            id: vec![],
            status: 7,
        };
        assert_eq!(unknown.status(), None);
        assert!(unknown.to_string().contains("status 7"));
    }
}
