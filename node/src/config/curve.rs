//! The `curve.*` keys (issue #19): CurveZMQ (RFC 26) on the endpoints zper's own ZMTP engine
//! serves (writer and reader). Off unless `curve.secret_key_file` is set.

use super::*;

/// An endpoint that can require CURVE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CurveEndpointName {
    /// The writer (ROUTER :5555).
    Writer,
    /// The reader (ROUTER :5556).
    Reader,
}

impl CurveEndpointName {
    /// The name in `curve.endpoints`.
    pub fn as_str(self) -> &'static str {
        match self {
            CurveEndpointName::Writer => "writer",
            CurveEndpointName::Reader => "reader",
        }
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
    /// The endpoints that require CURVE (`curve.endpoints`, default `writer,reader`).
    pub endpoints: Vec<CurveEndpointName>,
}

impl CurveSettings {
    /// Whether `endpoint` requires CURVE.
    pub fn on(&self, endpoint: CurveEndpointName) -> bool {
        self.secret_key_file.is_some() && self.endpoints.contains(&endpoint)
    }
}

/// Reads the `curve.*` keys; `writer_libzmq`/`reader_libzmq` say whether those endpoints run
/// on libzmq (`writer.engine = libzmq`), where zper does not set CURVE up.
///
/// Errors: a half-set configuration, an unknown endpoint name, CURVE asked of a libzmq engine.
pub(super) fn curve_settings(
    map: &HashMap<String, String>,
    writer_libzmq: bool,
    reader_libzmq: bool,
) -> Result<CurveSettings, ConfigError> {
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
    let list = endpoints.unwrap_or_else(|| "writer,reader".into());
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let e = match name {
            "writer" => CurveEndpointName::Writer,
            "reader" => CurveEndpointName::Reader,
            _ => {
                return Err(bad(
                    "curve.endpoints",
                    name,
                    "a comma-separated list of writer and reader (the endpoints zper's own ZMTP engine serves)",
                ))
            }
        };
        if !c.endpoints.contains(&e) {
            c.endpoints.push(e);
        }
    }
    for (e, libzmq, key) in [
        (CurveEndpointName::Writer, writer_libzmq, "writer.engine"),
        (CurveEndpointName::Reader, reader_libzmq, "reader.engine"),
    ] {
        if libzmq && c.endpoints.contains(&e) {
            return Err(bad(
                key,
                "libzmq",
                format!(
                    "zmtp while curve.endpoints names {} (CURVE runs in zper's own engine)",
                    e.as_str()
                ),
            ));
        }
    }
    Ok(c)
}
