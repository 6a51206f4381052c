//! Where the CLI connects when no endpoint flag is given: the endpoints of `--config FILE` (with
//! `*` and `0.0.0.0` replaced by 127.0.0.1), else a local node on the default ports.

use anyhow::Result;
use zper_client::{connectable, Endpoints};
use zper_node::NodeConfig;

/// The endpoints of an optional node config file.
///
/// Errors: an unreadable or invalid config file.
pub fn targets(config: Option<&std::path::Path>) -> Result<Endpoints> {
    let Some(path) = config else {
        return Ok(Endpoints::local());
    };
    let c = NodeConfig::from_file(path)?;
    Ok(Endpoints {
        writer: connectable(&c.writer_bind),
        reader: connectable(&c.reader_bind),
        admin: c
            .cluster
            .http_advertise
            .clone()
            .unwrap_or_else(|| c.cluster.http_bind.replace("0.0.0.0:", "127.0.0.1:")),
        admin_token: c.cluster.admin_token.clone(),
        admin_ca: c.cluster.tls_ca.clone(),
        dolly: connectable(&c.dolly_requests_bind),
        controller: connectable(&c.controller_bind),
        curve: None,
    })
}
