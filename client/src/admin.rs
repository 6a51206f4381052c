//! A client of the HTTP admin API (docs/operations.md "Admin API"): topics, brokers, Raft
//! state, membership. Views come back as JSON values in the shapes the API documents; errors
//! carry the API's `{code, message}` body.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use thiserror::Error;
pub use zper_meta::views::{
    AddNodeRequest, AlterTopicRequest, BrokerView, CreateTopicRequest, FragmentView, RaftView,
    ReadyView, TopicView, VotersView,
};
pub use zper_meta::FragmentPolicy;

/// Why an admin request failed.
#[derive(Debug, Error)]
pub enum AdminError {
    /// The node did not answer (connection refused, timed out).
    #[error("admin API at {base} not reachable: {source}")]
    Unreachable {
        /// `http://host:port`.
        base: String,
        /// The HTTP client's error.
        source: reqwest::Error,
    },
    /// The API answered with an error status and its `{code, message}` body.
    #[error("{code} ({status}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The body's `code` (e.g. `topic_exists`), `error` when there is none.
        code: String,
        /// The body's `message`, or the whole body.
        message: String,
    },
    /// The HTTP client could not be built or the body not read.
    #[error("admin API: {0}")]
    Http(#[from] reqwest::Error),
    /// The CA file for an admin port over TLS (`--tls-ca`, `http.tls_ca`) could not be read
    /// or holds no PEM certificate.
    #[error("CA certificates {path}: {message}")]
    Ca {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The answer is not the view the route documents (a node of another version?).
    #[error("admin API {path}: unexpected answer: {message}")]
    Body {
        /// The route.
        path: String,
        /// What did not match.
        message: String,
    },
}

impl AdminError {
    /// The HTTP status of an [`AdminError::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            AdminError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A blocking client of one node's admin API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    base: String,
    client: reqwest::blocking::Client,
    token: Option<String>,
}

impl AdminClient {
    /// A client of the node at `address` (`host:port`), sending `token` as a bearer token when
    /// given; each request waits at most `timeout`.
    ///
    /// Errors: the HTTP client could not be built.
    pub fn new(
        address: &str,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        Self::with_ca(address, token, timeout, None)
    }

    /// As [`AdminClient::new`], over TLS (`https://`) when `ca` names a PEM file of the CA
    /// certificates to trust (only those: the system's roots are not used), for a node with
    /// `http.tls_cert` set (issue #19).
    ///
    /// Errors: [`AdminError::Ca`] when the file is unreadable or holds no certificate; the
    /// HTTP client could not be built.
    pub fn with_ca(
        address: &str,
        token: Option<String>,
        timeout: Duration,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, AdminError> {
        let mut builder = reqwest::blocking::Client::builder().timeout(timeout);
        let scheme = match ca {
            None => "http",
            Some(path) => {
                let bad = |message: String| AdminError::Ca {
                    path: path.to_path_buf(),
                    message,
                };
                let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
                let certs =
                    reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
                if certs.is_empty() {
                    return Err(bad("no PEM CERTIFICATE block".into()));
                }
                builder = certs.into_iter().fold(
                    builder.use_rustls_tls().tls_built_in_root_certs(false),
                    |b, c| b.add_root_certificate(c),
                );
                "https"
            }
        };
        Ok(AdminClient {
            base: format!("{scheme}://{address}"),
            client: builder.build()?,
            token,
        })
    }

    /// One request: `method` on `path` (e.g. `/v1/topics`) with an optional JSON body; the
    /// answer's JSON (`Null` for an empty body, a string for a non-JSON one).
    ///
    /// Errors: [`AdminError::Unreachable`]; [`AdminError::Api`] for a non-2xx answer.
    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, AdminError> {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().map_err(|source| AdminError::Unreachable {
            base: self.base.clone(),
            source,
        })?;
        let status = resp.status();
        let text = resp.text()?;
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            return Err(AdminError::Api {
                status: status.as_u16(),
                code: value["code"].as_str().unwrap_or("error").to_owned(),
                message: match value["message"].as_str() {
                    Some(m) => m.to_owned(),
                    None => value.to_string(),
                },
            });
        }
        Ok(value)
    }

    /// One request whose answer is a JSON view of type `T`.
    ///
    /// Errors: as [`AdminClient::call`]; [`AdminError::Body`] when the answer is not a `T`.
    pub fn call_typed<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, AdminError> {
        let value = self.call(method, path, body)?;
        serde_json::from_value(value).map_err(|e| AdminError::Body {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// `GET /v1/topics`: every topic with its fragments.
    ///
    /// Errors: as [`AdminClient::call_typed`].
    pub fn topics(&self) -> Result<Vec<TopicView>, AdminError> {
        self.call_typed(reqwest::Method::GET, "/v1/topics", None)
    }

    /// `GET /v1/topics/{name}`: the topic, its fragments and this node's copies.
    ///
    /// Errors: as [`AdminClient::call_typed`] (404 `topic_not_found`).
    pub fn topic(&self, name: &str) -> Result<TopicView, AdminError> {
        self.call_typed(reqwest::Method::GET, &format!("/v1/topics/{name}"), None)
    }

    /// `POST /v1/topics/{name}`: creates a topic.
    ///
    /// Errors: as [`AdminClient::call_typed`] (409 `topic_exists`, 400 `invalid_name`, ...).
    pub fn create_topic(
        &self,
        name: &str,
        spec: &CreateTopicRequest,
    ) -> Result<TopicView, AdminError> {
        let body = serde_json::to_value(spec).unwrap_or_else(|_| json!({}));
        self.call_typed(
            reqwest::Method::POST,
            &format!("/v1/topics/{name}"),
            Some(&body),
        )
    }

    /// `PATCH /v1/topics/{name}`: changes what can change after creation (the retention).
    ///
    /// Errors: as [`AdminClient::call_typed`] (404 for an unknown topic, 400 for 0 hours).
    pub fn alter_topic(
        &self,
        name: &str,
        change: &AlterTopicRequest,
    ) -> Result<TopicView, AdminError> {
        let body = serde_json::to_value(change).unwrap_or_else(|_| json!({}));
        self.call_typed(
            reqwest::Method::PATCH,
            &format!("/v1/topics/{name}"),
            Some(&body),
        )
    }

    /// `DELETE /v1/topics/{name}`.
    ///
    /// Errors: as [`AdminClient::call`] (404 `topic_not_found`).
    pub fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        self.call(reqwest::Method::DELETE, &format!("/v1/topics/{name}"), None)
            .map(drop)
    }

    /// `GET /v1/raft`: term, leader, voters, learners, the metadata's state hash.
    ///
    /// Errors: as [`AdminClient::call_typed`].
    pub fn raft(&self) -> Result<RaftView, AdminError> {
        self.call_typed(reqwest::Method::GET, "/v1/raft", None)
    }

    /// `GET /v1/brokers`: every node with its endpoints and liveness.
    ///
    /// Errors: as [`AdminClient::call_typed`].
    pub fn brokers(&self) -> Result<Vec<BrokerView>, AdminError> {
        self.call_typed(reqwest::Method::GET, "/v1/brokers", None)
    }

    /// `GET /v1/status/ready`: the view when the node serves.
    ///
    /// Errors: as [`AdminClient::call_typed`] (503 with the view as its message).
    pub fn ready(&self) -> Result<ReadyView, AdminError> {
        self.call_typed(reqwest::Method::GET, "/v1/status/ready", None)
    }

    /// `POST /v1/cluster/nodes`: adds node `id` (admin address `http`) as a voter; the voters
    /// afterwards.
    ///
    /// Errors: as [`AdminClient::call_typed`].
    pub fn add_node(&self, id: u64, http: &str) -> Result<VotersView, AdminError> {
        let body = serde_json::to_value(AddNodeRequest {
            id,
            http: http.to_owned(),
            name: None,
        })
        .unwrap_or_else(|_| json!({ "id": id, "http": http }));
        self.call_typed(reqwest::Method::POST, "/v1/cluster/nodes", Some(&body))
    }

    /// `DELETE /v1/cluster/nodes/{id}`.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn remove_node(&self, id: u64) -> Result<(), AdminError> {
        self.call(
            reqwest::Method::DELETE,
            &format!("/v1/cluster/nodes/{id}"),
            None,
        )
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_holds_only_what_was_given() {
        let body = serde_json::to_value(CreateTopicRequest {
            fragments: Some(3),
            ..CreateTopicRequest::default()
        })
        .expect("serializes");
        assert_eq!(body, json!({ "fragments": 3 }));
    }

    #[test]
    fn a_node_that_is_down_is_unreachable_not_a_panic() {
        // Port 9 (discard) on loopback: nothing listens in the test environment.
        let c = AdminClient::new("127.0.0.1:9", None, Duration::from_millis(500)).expect("client");
        match c.topics() {
            Err(AdminError::Unreachable { base, .. }) => assert_eq!(base, "http://127.0.0.1:9"),
            other => panic!("{other:?}"),
        }
    }
}
