//! TLS to PostgreSQL through rustls on aws-lc-rs (the process's one crypto provider), over
//! tokio-rustls: a small `MakeTlsConnect` of our own rather than a crate that would bring
//! a second provider.
//!
//! What is checked follows libpq's `sslmode`: `verify-full` checks the certificate chain
//! and the host name, `verify-ca` the chain only, `require` and `prefer` encrypt without
//! checking (unless `sslrootcert` is given, when `require` checks the chain, as libpq
//! does). The roots are the file `sslrootcert` names (PEM), or the Mozilla roots compiled
//! in (`sslrootcert=system` or none given).

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// What a TLS connection checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing: the connection is encrypted, the server not authenticated.
    Nothing,
    /// The chain up to a trusted root, not the name.
    Chain,
    /// The chain and that the certificate names the host.
    Full,
}

/// Makes rustls connections for tokio-postgres.
#[derive(Clone)]
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustlsConnect").finish_non_exhaustive()
    }
}

/// The TLS set-up could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The `sslrootcert` file could not be read or holds no certificate.
    #[error("sslrootcert {path}: {reason}")]
    RootCert {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Rustls(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The roots: the PEM file `root_cert` names, or the compiled-in Mozilla roots.
fn roots(root_cert: Option<&str>) -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    match root_cert {
        None | Some("system") => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let bad = |reason: String| TlsSetupError::RootCert {
                path: path.to_owned(),
                reason,
            };
            let certs = CertificateDer::pem_file_iter(Path::new(path))
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
    }
    Ok(roots)
}

impl RustlsConnect {
    /// A connector checking `verify` against the roots of `root_cert`.
    pub fn new(verify: Verify, root_cert: Option<&str>) -> Result<Self, TlsSetupError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
        let config = match verify {
            Verify::Full => builder
                .with_root_certificates(roots(root_cert)?)
                .with_no_client_auth(),
            Verify::Chain | Verify::Nothing => {
                let inner = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots(root_cert)?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(Lenient {
                        inner,
                        check_chain: verify == Verify::Chain,
                        provider,
                    }))
                    .with_no_client_auth()
            }
        };
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

/// `verify-ca` (the chain, not the name) and `require` (nothing): signatures of the
/// handshake are still checked, so the session key is bound to the certificate shown.
#[derive(Debug)]
struct Lenient {
    inner: Arc<WebPkiServerVerifier>,
    check_chain: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.check_chain {
            return Ok(ServerCertVerified::assertion());
        }
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connector;
    type Error = io::Error;

    /// `domain` is empty for a Unix socket (tokio-postgres names no host there): PostgreSQL
    /// offers no TLS on its Unix sockets, so such a connection is made without it, and the
    /// connector only answers a handshake it is asked for with an error.
    fn make_tls_connect(&mut self, domain: &str) -> Result<Connector, io::Error> {
        let name = if domain.is_empty() {
            None
        } else {
            Some(
                ServerName::try_from(domain.to_owned())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            )
        };
        Ok(Connector {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One connection's TLS handshake: `name` is the server's, none on a Unix socket.
pub struct Connector {
    connector: tokio_rustls::TlsConnector,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = self.name.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "TLS on a Unix socket: PostgreSQL offers none there; connect over TCP, \
                     or set sslmode=disable or prefer",
                )
            })?;
            let tls = self.connector.connect(name, stream).await?;
            Ok(Stream(Box::new(tls)))
        })
    }
}

/// A TLS stream to the database.
pub struct Stream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM without channel binding (tokio-postgres's `channel_binding=prefer`).
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    //! The connector against a stand-in server that speaks the start of PostgreSQL's
    //! protocol (the SSL request, then TLS, then the startup message): what each `sslmode`
    //! lets through, with no database needed.

    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::PostgresStore;
    use crate::connect::Target;
    use crate::test_db::TestDb;
    use mandate_storage::location::DbLocation;
    use mandate_storage::peers::PeerStore;

    /// A CA, and a server certificate it signed for `localhost` only.
    struct Pki {
        ca_pem: String,
        server: rustls::ServerConfig,
    }

    fn pki() -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &ca, &ca_key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
        Pki {
            ca_pem: ca.pem(),
            server,
        }
    }

    /// Serves one connection: answers the SSL request with `S`, does the TLS handshake,
    /// reads the startup message. `Ok` if the client got that far over TLS.
    async fn stand_in(listener: tokio::net::TcpListener, config: rustls::ServerConfig) -> bool {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 8];
        socket.read_exact(&mut request).await.unwrap();
        assert_eq!(
            &request[4..],
            &80_877_103u32.to_be_bytes(),
            "an SSL request"
        );
        socket.write_all(b"S").await.unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let Ok(mut tls) = acceptor.accept(socket).await else {
            return false;
        };
        let mut length = [0u8; 4];
        tls.read_exact(&mut length).await.is_ok()
    }

    /// Whether a connection to `host` with `params` gets through TLS to the startup.
    async fn gets_through(pki: &Pki, host: &str, params: &str) -> bool {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(stand_in(listener, pki.server.clone()));
        let url = format!("postgres://mandate:pw@{host}:{port}/m?connect_timeout=5&{params}");
        let DbLocation::Postgres(url) = url.parse().unwrap() else {
            panic!("a postgres URL");
        };
        let target = Target::parse(&url).unwrap();
        // The stand-in closes after the startup message: the client fails either way.
        let _ = target.config.connect(target.tls.clone()).await;
        server.await.unwrap()
    }

    #[tokio::test]
    async fn each_sslmode_checks_what_libpq_checks() {
        let pki = pki();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &pki.ca_pem).unwrap();
        let ca = ca.display().to_string();
        let root = format!("sslrootcert={ca}");
        // verify-full: the chain and the name.
        assert!(gets_through(&pki, "localhost", &format!("sslmode=verify-full&{root}")).await);
        assert!(!gets_through(&pki, "127.0.0.1", &format!("sslmode=verify-full&{root}")).await);
        assert!(!gets_through(&pki, "localhost", "sslmode=verify-full").await);
        // verify-ca: the chain, whatever the name.
        assert!(gets_through(&pki, "127.0.0.1", &format!("sslmode=verify-ca&{root}")).await);
        assert!(!gets_through(&pki, "localhost", "sslmode=verify-ca&sslrootcert=system").await);
        // require: encrypted; the chain checked only when sslrootcert is given.
        assert!(gets_through(&pki, "127.0.0.1", "sslmode=require").await);
        assert!(gets_through(&pki, "127.0.0.1", &format!("sslmode=require&{root}")).await);
        let other = pki_other_ca(dir.path());
        assert!(
            !gets_through(
                &pki,
                "localhost",
                &format!("sslmode=require&sslrootcert={other}")
            )
            .await
        );
    }

    /// A CA file that did not sign the stand-in's certificate.
    fn pki_other_ca(dir: &std::path::Path) -> String {
        let path = dir.join("other.pem");
        std::fs::write(&path, pki().ca_pem).unwrap();
        path.display().to_string()
    }

    /// A missing root file is an error naming the file, before any connection.
    #[test]
    fn a_missing_root_file_is_named() {
        let url = "postgres://u:pw@localhost/m?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
        let DbLocation::Postgres(url) = url.parse().unwrap() else {
            panic!("a postgres URL");
        };
        let error = Target::parse(&url).err().unwrap().to_string();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    }

    fn postgres_url(text: &str) -> mandate_storage::location::PostgresUrl {
        match text.parse::<DbLocation>() {
            Ok(DbLocation::Postgres(url)) => url,
            other => panic!("{text} is not a PostgreSQL URL: {other:?}"),
        }
    }

    /// A URL naming the cluster's Unix socket (its directory percent-encoded as the host, as
    /// libpq reads it) connects and works: PostgreSQL offers no TLS there, so the default
    /// `sslmode` (prefer) goes without it, and `require` is refused.
    #[tokio::test]
    async fn a_store_connects_over_the_clusters_unix_socket() {
        let Some(db) = TestDb::create("a_store_connects_over_the_clusters_unix_socket") else {
            return;
        };
        let dir = db
            .one::<String>("SELECT split_part(current_setting('unix_socket_directories'), ',', 1)");
        let dir = dir.trim();
        if dir.is_empty() {
            eprintln!(
                "skipped: the cluster of {} listens on no Unix socket",
                crate::test_db::VAR
            );
            return;
        }
        let port = db.number("SELECT current_setting('port')::BIGINT");
        let name = db.one::<String>("SELECT current_database()::TEXT");
        let user = db.one::<String>("SELECT current_user::TEXT");
        let socket = format!(
            "postgres://{user}@{}:{port}/{name}",
            dir.replace('/', "%2F")
        );
        let store = PostgresStore::open(&postgres_url(&socket), true)
            .await
            .unwrap();
        assert_eq!(store.heartbeat("proc-unix").await.unwrap().live, 1);
        assert_eq!(
            db.number("SELECT COUNT(*) FROM processes WHERE id = 'proc-unix'"),
            1,
            "the heartbeat went through the socket to this database"
        );
        let refused =
            PostgresStore::open(&postgres_url(&format!("{socket}?sslmode=require")), true).await;
        assert!(refused.is_err(), "TLS asked for where there is none");
    }
}
