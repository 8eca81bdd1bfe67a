//! TLS for the voice socket: a CA made at start and a certificate for 127.0.0.1 it signed, so a
//! client trusting the CA bundle speaks `wss://` to the loopback as it does to Discord.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::voice::server::VoiceError;

/// Accepts TCP connections and completes their TLS handshakes, for `axum::serve`.
pub(super) struct TlsListener {
    pub tcp: TcpListener,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            match tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::warn!(error = %e, "voice TLS handshake failed"),
                Err(_) => tracing::warn!("voice TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A CA made now, and a certificate for 127.0.0.1 it signed; returns the acceptor and the CA's PEM.
pub(super) fn tls_acceptor() -> Result<(tokio_rustls::TlsAcceptor, String), VoiceError> {
    let cert_err = |e: rcgen::Error| VoiceError::Cert(e.to_string());
    let ca_key = rcgen::KeyPair::generate().map_err(cert_err)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "Clankie loopback voice CA");
    let ca = ca_params.self_signed(&ca_key).map_err(cert_err)?;
    let key = rcgen::KeyPair::generate().map_err(cert_err)?;
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(cert_err)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "127.0.0.1");
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(cert_err)?;
    let der_key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| VoiceError::Cert(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca.der().clone()], der_key)
        .map_err(|e| VoiceError::Cert(e.to_string()))?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca.pem()))
}
