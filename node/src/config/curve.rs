//! The `curve.*` keys (issue #19): CurveZMQ (RFC 26) on the node's ZMQ endpoints, every one of
//! them unless `curve.endpoints` names fewer. Off unless `curve.secret_key_file` is set.

use super::*;

/// An endpoint that can require CURVE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CurveEndpointName {
    /// The writer (ROUTER :5555).
    Writer,
    /// The reader (ROUTER :5556).
    Reader,
    /// The ack publisher (PUB :5557).
    Ack,
    /// The controller (ROUTER :5558).
    Controller,
    /// The relay (ROUTER :5559), which peer nodes also use.
    Relay,
    /// Replication (ROUTER :5560): only cluster members (the node's own key pair, which
    /// every node of a cluster shares) may fetch or report progress.
    Replication,
    /// Dolly's requests, updates and snapshots (3266, 3264, 3265).
    Dolly,
}

impl CurveEndpointName {
    /// Every endpoint, the default of `curve.endpoints`.
    pub const ALL: [CurveEndpointName; 7] = [
        CurveEndpointName::Writer,
        CurveEndpointName::Reader,
        CurveEndpointName::Ack,
        CurveEndpointName::Controller,
        CurveEndpointName::Relay,
        CurveEndpointName::Replication,
        CurveEndpointName::Dolly,
    ];

    /// The name in `curve.endpoints`.
    pub fn as_str(self) -> &'static str {
        match self {
            CurveEndpointName::Writer => "writer",
            CurveEndpointName::Reader => "reader",
            CurveEndpointName::Ack => "ack",
            CurveEndpointName::Controller => "controller",
            CurveEndpointName::Relay => "relay",
            CurveEndpointName::Replication => "replication",
            CurveEndpointName::Dolly => "dolly",
        }
    }

    /// The endpoint called `name` in `curve.endpoints`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// CURVE on the node's ZMQ endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurveSettings {
    /// The server's secret key (`curve.secret_key_file`: czmq's certificate or a bare Z85
    /// key). `None`: CURVE is off and every endpoint speaks NULL, as ZPER's clients expect.
    pub secret_key_file: Option<PathBuf>,
    /// The authorised client public keys (`curve.clients`: a directory of key files or one
    /// file of keys, re-read while the node runs); `None` with `curve.clients = *`: any
    /// client key (encryption without authorisation).
    pub clients: Option<PathBuf>,
    /// The endpoints that require CURVE (`curve.endpoints`, default all of them).
    pub endpoints: Vec<CurveEndpointName>,
}

impl CurveSettings {
    /// Whether `endpoint` requires CURVE.
    pub fn on(&self, endpoint: CurveEndpointName) -> bool {
        self.secret_key_file.is_some() && self.endpoints.contains(&endpoint)
    }
}

/// Reads the `curve.*` keys. zper's own engine runs CURVE on the writer and reader; libzmq
/// (built with libsodium) runs it on the others, and on the writer and reader under
/// `writer.engine`/`reader.engine = libzmq`, authorising keys through ZAP (RFC 27).
///
/// Errors: a half-set configuration, an unknown endpoint name, an empty list.
pub(super) fn curve_settings(map: &HashMap<String, String>) -> Result<CurveSettings, ConfigError> {
    let get = |k: &str| {
        map.get(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let mut c = CurveSettings {
        secret_key_file: get("curve.secret_key_file").map(PathBuf::from),
        ..Default::default()
    };
    let clients = get("curve.clients");
    let endpoints = get("curve.endpoints");
    let Some(_) = &c.secret_key_file else {
        if let Some((k, v)) = [("curve.clients", &clients), ("curve.endpoints", &endpoints)]
            .into_iter()
            .find_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        {
            return Err(bad(
                k,
                v,
                "only with curve.secret_key_file (CURVE is off without the server's key)",
            ));
        }
        return Ok(c);
    };
    c.clients = match clients.as_deref() {
        None => {
            return Err(bad(
                "curve.clients",
                "",
                "a directory or file of authorised client public keys, or * for any key (required with curve.secret_key_file)",
            ))
        }
        Some("*") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    let all = CurveEndpointName::ALL
        .map(CurveEndpointName::as_str)
        .join(",");
    let list = endpoints.unwrap_or_else(|| all.clone());
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(e) = CurveEndpointName::parse(name) else {
            return Err(bad(
                "curve.endpoints",
                name,
                format!("a comma-separated list of {all}"),
            ));
        };
        if !c.endpoints.contains(&e) {
            c.endpoints.push(e);
        }
    }
    if c.endpoints.is_empty() {
        return Err(bad(
            "curve.endpoints",
            &list,
            format!("at least one of {all} (leave curve.secret_key_file unset to turn CURVE off)"),
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Result<CurveSettings, ConfigError> {
        let map = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        curve_settings(&map)
    }

    #[test]
    fn curve_is_off_without_a_key_and_on_every_endpoint_by_default() {
        assert_eq!(settings(&[]).expect("off"), CurveSettings::default());
        let on = settings(&[
            ("curve.secret_key_file", "/k/node.key_secret"),
            ("curve.clients", "*"),
        ])
        .expect("on");
        assert_eq!(on.endpoints, CurveEndpointName::ALL.to_vec());
        assert!(on.clients.is_none());
        assert!(on.on(CurveEndpointName::Replication));
    }

    #[test]
    fn curve_endpoints_choose_some_and_refuse_unknown_names_and_half_settings() {
        let some = settings(&[
            ("curve.secret_key_file", "/k/node.key_secret"),
            ("curve.clients", "/k/clients"),
            ("curve.endpoints", "replication, writer,writer"),
        ])
        .expect("some");
        assert_eq!(
            some.endpoints,
            vec![CurveEndpointName::Replication, CurveEndpointName::Writer]
        );
        assert!(!some.on(CurveEndpointName::Reader));
        for bad_set in [
            vec![
                ("curve.secret_key_file", "/k/s"),
                ("curve.clients", "*"),
                ("curve.endpoints", "writer,raft"),
            ],
            vec![
                ("curve.secret_key_file", "/k/s"),
                ("curve.clients", "*"),
                ("curve.endpoints", " , "),
            ],
            vec![("curve.secret_key_file", "/k/s")],
            vec![("curve.clients", "*")],
        ] {
            let e = settings(&bad_set).expect_err("refused");
            assert!(e.to_string().contains("curve."), "{e}");
        }
    }
}
