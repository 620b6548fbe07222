//! A domain's app links as the redirect port serves them (docs/spec.md §14):
//! `/.well-known/apple-app-site-association` and `/.well-known/assetlinks.json`, 200 with
//! the stored bytes, `Content-Type: application/json` and a public `Cache-Control`; never a
//! redirect (Apple does not follow one). Built once per document when the domains are
//! loaded: an answer clones a `Bytes` and three header values.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::Response;
use http_body_util::Full;
use rebound_core::app_links::{AppLinkDocument, AppLinks};

/// How long a client or shared cache may keep a document: an hour, as the platforms' own
/// fetchers (Apple's CDN, Google's verifier) cache them for longer anyway.
pub const MAX_AGE_SECS: u64 = 3600;

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const CACHED: HeaderValue = HeaderValue::from_static("public, max-age=3600");

/// One document's answer, built once: its bytes, and the `Content-Length` a HEAD states
/// without them.
#[derive(Debug, Clone)]
struct Document {
    body: Bytes,
    length: HeaderValue,
}

impl Document {
    fn new(text: &str) -> Document {
        Document {
            body: Bytes::copy_from_slice(text.as_bytes()),
            length: HeaderValue::from(text.len()),
        }
    }
}

/// The app links of one domain, ready to answer.
#[derive(Debug, Clone, Default)]
pub struct AppLinkAnswers {
    apple_app_site_association: Option<Document>,
    assetlinks: Option<Document>,
}

impl AppLinkAnswers {
    pub fn new(links: &AppLinks) -> AppLinkAnswers {
        AppLinkAnswers {
            apple_app_site_association: links.apple_app_site_association.as_deref().map(Document::new),
            assetlinks: links.assetlinks.as_deref().map(Document::new),
        }
    }

    /// The answer of `document` (to a HEAD without its body), or `None` when this domain
    /// has none.
    pub fn answer(&self, document: AppLinkDocument, head: bool) -> Option<Response<Full<Bytes>>> {
        let doc = match document {
            AppLinkDocument::AppleAppSiteAssociation => self.apple_app_site_association.as_ref()?,
            AppLinkDocument::Assetlinks => self.assetlinks.as_ref()?,
        };
        let mut res = match head {
            true => Response::new(Full::default()),
            false => Response::new(Full::new(doc.body.clone())),
        };
        let headers = res.headers_mut();
        headers.insert(CONTENT_TYPE, JSON);
        headers.insert(CACHE_CONTROL, CACHED);
        headers.insert(CONTENT_LENGTH, doc.length.clone());
        Some(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_document_is_answered_with_its_bytes_and_a_missing_one_is_not() {
        assert_eq!(CACHED, format!("public, max-age={MAX_AGE_SECS}").as_str());
        let answers = AppLinkAnswers::new(&AppLinks {
            apple_app_site_association: Some(r#"{"applinks":{}}"#.into()),
            assetlinks: None,
        });
        for head in [false, true] {
            let res = answers.answer(AppLinkDocument::AppleAppSiteAssociation, head).unwrap();
            assert_eq!(res.status(), 200);
            let h = res.headers();
            assert_eq!(
                (&h[CONTENT_TYPE], &h[CACHE_CONTROL], &h[CONTENT_LENGTH]),
                (&JSON, &CACHED, &HeaderValue::from(15))
            );
            let body = res.into_body().collect().await.unwrap().to_bytes();
            let want: &[u8] = if head { b"" } else { br#"{"applinks":{}}"# };
            assert_eq!(body, want, "head: {head}");
            assert!(answers.answer(AppLinkDocument::Assetlinks, head).is_none());
        }
        assert!(AppLinkAnswers::default()
            .answer(AppLinkDocument::AppleAppSiteAssociation, false)
            .is_none());
    }
}
