//! TLS on the admin port (issue #19): the HTTP admin API, the Raft stream and the forwarded
//! proposals all travel over the node's one HTTP address, so one certificate covers them.
//!
//! The server side ([`server_config`]) reads a PEM certificate chain and private key; the
//! client side ([`PeerTls`]) trusts the CA certificates of one PEM file (a private cluster CA
//! rather than the system's roots) and names the peer by the host of its `host:port` address
//! (a DNS name or an IP address, which the certificate must list as a subject alternative
//! name). rustls with the ring provider, both already built for the chaos suite's Docker
//! client.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Why a TLS setting could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {message}")]
    File {
        /// What the file should hold ("certificate", "private key", "CA certificates").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// rustls refused the certificates or key (for example a key that does not match).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |message: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(e.to_string()))?;
    if certs.is_empty() {
        return Err(file("no PEM CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// The server side of TLS on the admin port: the certificate chain in `cert` (PEM, leaf
/// first) and its private key in `key` (PEM: PKCS#8, PKCS#1 or SEC1). HTTP/1.1 only (the
/// Raft stream is an HTTP/1.1 upgrade).
///
/// Errors: [`TlsError::File`] when a file is unreadable or empty, [`TlsError::Config`] when the
/// key does not fit the certificate.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates("certificate", cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
        what: "private key",
        path: key.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::File {
            what: "certificate",
            path: cert.to_path_buf(),
            message: format!("does not fit the private key {}: {e}", key.display()),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What is wrong with this node's own certificate as its peers will see it (attack finding
/// of issue #19: an expired certificate, or one that does not name the advertised host,
/// let the node start and only the peers' logs said why): the chain in `cert` verified
/// against the CA of `ca` for the host of `advertise` (`host:port`) at the current time, as a
/// peer's [`PeerTls`] verifies it. `None` when it would be accepted.
pub fn check_own_certificate(cert: &Path, ca: &Path, advertise: &str) -> Option<String> {
    let chain = match certificates("certificate", cert) {
        Ok(c) => c,
        Err(e) => return Some(e.to_string()),
    };
    let mut roots = rustls::RootCertStore::empty();
    match certificates("CA certificates", ca) {
        Ok(cas) => {
            for c in cas {
                if let Err(e) = roots.add(c) {
                    return Some(format!("CA certificates {}: {e}", ca.display()));
                }
            }
        }
        Err(e) => return Some(e.to_string()),
    }
    let verifier = match rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider(),
    )
    .build()
    {
        Ok(v) => v,
        Err(e) => return Some(format!("CA certificates {}: {e}", ca.display())),
    };
    let host = advertise
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(advertise);
    let name = match ServerName::try_from(host.to_owned()) {
        Ok(n) => n,
        Err(e) => {
            return Some(format!(
                "advertised host {host:?} is not a server name: {e}"
            ))
        }
    };
    let (leaf, intermediates) = chain.split_first()?;
    use rustls::client::danger::ServerCertVerifier;
    match verifier.verify_server_cert(
        leaf,
        intermediates,
        &name,
        &[],
        rustls::pki_types::UnixTime::now(),
    ) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "this node's certificate {} will be refused by its peers for {host}: {e}",
            cert.display()
        )),
    }
}

/// How this node (or a client) reaches admin ports: plain HTTP (the default), or TLS trusting
/// one CA file. Cheap to clone.
#[derive(Clone, Default)]
pub struct PeerTls {
    inner: Option<Arc<Trust>>,
}

struct Trust {
    connector: tokio_rustls::TlsConnector,
    /// The same CA certificates, for reqwest's own TLS set-up.
    ca: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.inner.is_some() {
            "https"
        } else {
            "http"
        })
    }
}

impl PeerTls {
    /// Plain HTTP.
    pub fn plain() -> Self {
        PeerTls::default()
    }

    /// TLS, trusting the CA certificates in the PEM file `ca`.
    ///
    /// Errors: [`TlsError::File`] when the file is unreadable or holds no certificate,
    /// [`TlsError::Config`] when rustls refuses one.
    pub fn trusting(ca: &Path) -> Result<Self, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certificates("CA certificates", ca)? {
            roots.add(c).map_err(TlsError::Config)?;
        }
        let file = |message: String| TlsError::File {
            what: "CA certificates",
            path: ca.to_path_buf(),
            message,
        };
        let pem = std::fs::read(ca).map_err(|e| file(e.to_string()))?;
        let ca = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| file(e.to_string()))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(PeerTls {
            inner: Some(Arc::new(Trust {
                connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
                ca,
            })),
        })
    }

    /// Whether admin ports are reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.is_some()
    }

    /// The URL scheme: `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.is_tls() {
            "https"
        } else {
            "http"
        }
    }

    /// `scheme://address` for an admin address `host:port`.
    pub fn base_url(&self, address: &str) -> String {
        format!("{}://{address}", self.scheme())
    }

    /// A reqwest client builder that trusts this CA (and only it) when TLS is on.
    pub fn reqwest(&self) -> reqwest::ClientBuilder {
        let builder = reqwest::Client::builder();
        match &self.inner {
            None => builder,
            Some(t) => t.ca.iter().fold(
                builder.use_rustls_tls().tls_built_in_root_certs(false),
                |b, c| b.add_root_certificate(c.clone()),
            ),
        }
    }

    /// Opens a connection to the admin port at `address` (`host:port`), with the TLS
    /// handshake when TLS is on (the certificate must name `host`).
    ///
    /// Errors: the connection or the handshake failed (an untrusted or misnamed certificate is
    /// `InvalidData`).
    pub async fn connect(&self, address: &str) -> io::Result<PeerStream> {
        let tcp = TcpStream::connect(address).await?;
        tcp.set_nodelay(true)?;
        let Some(t) = &self.inner else {
            return Ok(PeerStream::Plain(tcp));
        };
        let host = match address.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => address,
        };
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = t.connector.connect(name, tcp).await?;
        Ok(PeerStream::Tls(Box::new(tls)))
    }
}

/// A connection to a peer's admin port, plain or TLS.
pub enum PeerStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl PeerStream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            PeerStream::Plain(t) => t,
            PeerStream::Tls(t) => t.get_ref().0,
        }
    }
}

impl std::fmt::Debug for PeerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerStream::Plain(_) => f.write_str("PeerStream::Plain"),
            PeerStream::Tls(_) => f.write_str("PeerStream::Tls"),
        }
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(t) => Pin::new(t).poll_read(cx, buf),
            PeerStream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(t) => Pin::new(t).poll_write(cx, buf),
            PeerStream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(t) => Pin::new(t).poll_flush(cx),
            PeerStream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(t) => Pin::new(t).poll_shutdown(cx),
            PeerStream::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}
