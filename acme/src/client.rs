//! The HTTPS client instant-acme talks to the ACME server with: hyper over rustls with
//! aws-lc-rs (the provider the binary uses, never a process default), trusting the system's
//! roots or the ones configured (a test CA such as pebble's).

use crate::AcmeError;
use bytes::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

struct AcmeHttp(Client<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>);

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let response = self.0.request(req);
        Box::pin(async move {
            match response.await {
                Ok(response) => Ok(BytesResponse::from(response)),
                Err(e) => Err(instant_acme::Error::Other(Box::new(e))),
            }
        })
    }
}

/// A client trusting `roots_pem` (PEM certificates), or the system's roots when `None`.
pub(crate) fn acme_http_client(roots_pem: Option<&str>) -> Result<Box<dyn HttpClient>, AcmeError> {
    let mut roots = rustls::RootCertStore::empty();
    match roots_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| AcmeError::Internal(format!("the ACME server's roots: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| AcmeError::Internal(format!("the ACME server's roots: {e}")))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "reading the system's roots");
            }
            roots.add_parsable_certificates(found.certs);
        }
    }
    if roots.is_empty() {
        return Err(AcmeError::Internal("no root to trust the ACME server with".to_owned()));
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| AcmeError::Internal(format!("TLS for the ACME client: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    Ok(Box::new(AcmeHttp(client)))
}
