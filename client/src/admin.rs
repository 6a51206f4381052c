//! A client of the HTTP admin API (docs/operations.md "Admin API"): topics, brokers, Raft
//! state, membership. Views come back as JSON values in the shapes the API documents; errors
//! carry the API's `{code, message}` body.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use thiserror::Error;

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

/// `POST /v1/topics/{name}`'s body: every field optional (the node's defaults apply).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateTopic {
    /// Fragments (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragments: Option<u32>,
    /// Copies of each fragment (default min(3, live nodes)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// Retention, hours (default 168).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain_hours: Option<u32>,
    /// `default` or `distribution` (`pirius.md` §7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
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
        Ok(AdminClient {
            base: format!("http://{address}"),
            client: reqwest::blocking::Client::builder()
                .timeout(timeout)
                .build()?,
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

    /// `GET /v1/topics`: every topic with its fragments.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn topics(&self) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, "/v1/topics", None)
    }

    /// `GET /v1/topics/{name}`: the topic, its fragments and this node's copies.
    ///
    /// Errors: as [`AdminClient::call`] (404 `topic_not_found`).
    pub fn topic(&self, name: &str) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, &format!("/v1/topics/{name}"), None)
    }

    /// `POST /v1/topics/{name}`: creates a topic.
    ///
    /// Errors: as [`AdminClient::call`] (409 `topic_exists`, 400 `invalid_name`, ...).
    pub fn create_topic(&self, name: &str, spec: &CreateTopic) -> Result<Value, AdminError> {
        let body = serde_json::to_value(spec).unwrap_or_else(|_| json!({}));
        self.call(
            reqwest::Method::POST,
            &format!("/v1/topics/{name}"),
            Some(&body),
        )
    }

    /// `DELETE /v1/topics/{name}`.
    ///
    /// Errors: as [`AdminClient::call`] (404 `topic_not_found`).
    pub fn delete_topic(&self, name: &str) -> Result<Value, AdminError> {
        self.call(reqwest::Method::DELETE, &format!("/v1/topics/{name}"), None)
    }

    /// `GET /v1/raft`: term, leader, voters, learners.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn raft(&self) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, "/v1/raft", None)
    }

    /// `GET /v1/brokers`: every node with its endpoints and liveness.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn brokers(&self) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, "/v1/brokers", None)
    }

    /// `GET /v1/status/ready`: 200 when the node serves.
    ///
    /// Errors: as [`AdminClient::call`] (503 with the reasons).
    pub fn ready(&self) -> Result<Value, AdminError> {
        self.call(reqwest::Method::GET, "/v1/status/ready", None)
    }

    /// `POST /v1/cluster/nodes`: adds node `id` (admin address `http`) as a voter.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn add_node(&self, id: u64, http: &str) -> Result<Value, AdminError> {
        let body = json!({ "id": id, "http": http });
        self.call(reqwest::Method::POST, "/v1/cluster/nodes", Some(&body))
    }

    /// `DELETE /v1/cluster/nodes/{id}`.
    ///
    /// Errors: as [`AdminClient::call`].
    pub fn remove_node(&self, id: u64) -> Result<Value, AdminError> {
        self.call(
            reqwest::Method::DELETE,
            &format!("/v1/cluster/nodes/{id}"),
            None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_holds_only_what_was_given() {
        let body = serde_json::to_value(CreateTopic {
            fragments: Some(3),
            ..CreateTopic::default()
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
