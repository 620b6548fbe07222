//! What the redirect port answers a visitor it has no redirect for: a small static page for
//! 404 and 410, or a redirect to a configured URL (Shlink's "not-found redirects"), and
//! where `GET /` goes. Everything is built once at start: an answer costs a clone of
//! static `Bytes` and of prebuilt header values, no allocation of its own and no
//! formatting. No page echoes the request.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION};
use http::{Response, StatusCode};
use http_body_util::Full;

const NOT_FOUND_PAGE: &[u8] = include_bytes!("../pages/not-found.html");
const GONE_PAGE: &[u8] = include_bytes!("../pages/gone.html");

const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
/// The pages load nothing and run nothing; their one `<style>` is inline.
const PAGE_POLICY: HeaderValue = HeaderValue::from_static(
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
);

/// Where the redirect port sends a visitor instead of showing a page; `None` shows the page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadEndTargets {
    /// For unknown, deleted and taken-down codes, and paths that are no code (404).
    pub not_found_url: Option<String>,
    /// For expired links (410).
    pub expired_url: Option<String>,
    /// For `GET /`; without it `/` gets the not-found answer.
    pub root_url: Option<String>,
}

/// A URL that cannot be a `Location` header.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} cannot be sent as a Location header")]
pub struct BadTarget(String);

/// One prebuilt answer.
#[derive(Debug, Clone)]
enum DeadEnd {
    /// `length` is the `Content-Length` a HEAD answer states without the body.
    Page {
        status: StatusCode,
        body: Bytes,
        length: HeaderValue,
    },
    Redirect(HeaderValue),
}

impl DeadEnd {
    fn new(url: &Option<String>, status: StatusCode, page: &'static [u8]) -> Result<DeadEnd, BadTarget> {
        match url {
            Some(url) => HeaderValue::from_str(url)
                .map(DeadEnd::Redirect)
                .map_err(|_| BadTarget(url.clone())),
            None => Ok(DeadEnd::Page {
                status,
                body: Bytes::from_static(page),
                length: HeaderValue::from(page.len()),
            }),
        }
    }

    /// The answer; to a HEAD without the body (hyper's HTTP/2 would send it).
    fn reply(&self, head: bool) -> Response<Full<Bytes>> {
        let mut res = match self {
            DeadEnd::Page { status, body, length } => {
                let mut res = match head {
                    true => Response::new(Full::default()),
                    false => Response::new(Full::new(body.clone())),
                };
                *res.status_mut() = *status;
                let headers = res.headers_mut();
                if head {
                    headers.insert(CONTENT_LENGTH, length.clone());
                }
                headers.insert(CONTENT_TYPE, HTML);
                headers.insert(CONTENT_SECURITY_POLICY, PAGE_POLICY);
                res
            }
            DeadEnd::Redirect(location) => {
                let mut res = Response::new(Full::default());
                *res.status_mut() = StatusCode::FOUND;
                res.headers_mut().insert(LOCATION, location.clone());
                res
            }
        };
        res.headers_mut().insert(CACHE_CONTROL, NO_STORE);
        res
    }
}

/// The answers for 404, 410 and `/`, built once.
#[derive(Debug, Clone)]
pub struct DeadEnds {
    not_found: DeadEnd,
    gone: DeadEnd,
    root: DeadEnd,
}

impl DeadEnds {
    pub fn new(targets: &DeadEndTargets) -> Result<DeadEnds, BadTarget> {
        let not_found = DeadEnd::new(&targets.not_found_url, StatusCode::NOT_FOUND, NOT_FOUND_PAGE)?;
        let root = match &targets.root_url {
            Some(_) => DeadEnd::new(&targets.root_url, StatusCode::NOT_FOUND, NOT_FOUND_PAGE)?,
            None => not_found.clone(),
        };
        Ok(DeadEnds {
            gone: DeadEnd::new(&targets.expired_url, StatusCode::GONE, GONE_PAGE)?,
            not_found,
            root,
        })
    }

    /// Unknown, deleted or taken down, or no code at all.
    pub fn not_found(&self, head: bool) -> Response<Full<Bytes>> {
        self.not_found.reply(head)
    }

    /// Expired.
    pub fn gone(&self, head: bool) -> Response<Full<Bytes>> {
        self.gone.reply(head)
    }

    /// `GET /` or `HEAD /`.
    pub fn root(&self, head: bool) -> Response<Full<Bytes>> {
        self.root.reply(head)
    }
}

impl Default for DeadEnds {
    /// The pages, no redirects.
    fn default() -> Self {
        DeadEnds::new(&DeadEndTargets::default()).expect("the built-in pages need no URL")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(res: Response<Full<Bytes>>) -> Bytes {
        res.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn without_targets_404_and_410_are_pages_and_root_is_the_404_page() {
        let ends = DeadEnds::default();
        for (res, status, title) in [
            (ends.not_found(false), 404, "Link not found"),
            (ends.gone(false), 410, "Link expired"),
            (ends.root(false), 404, "Link not found"),
        ] {
            assert_eq!(res.status(), status);
            assert_eq!(res.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
            assert_eq!(res.headers()[CACHE_CONTROL], "no-store");
            let page = String::from_utf8(body(res).await.to_vec()).unwrap();
            assert!(page.contains(&format!("<title>{title}</title>")), "{page}");
            assert!(
                !page.contains("src=") && !page.contains("href="),
                "loads nothing: {page}"
            );
        }
        let head = ends.gone(true);
        assert_eq!(head.headers()[CONTENT_LENGTH], GONE_PAGE.len().to_string().as_str());
        assert!(body(head).await.is_empty());
    }

    #[tokio::test]
    async fn targets_turn_each_answer_into_a_redirect() {
        let ends = DeadEnds::new(&DeadEndTargets {
            not_found_url: Some("https://example.com/missing".into()),
            expired_url: Some("https://example.com/expired".into()),
            root_url: Some("https://example.com/".into()),
        })
        .unwrap();
        for (res, location) in [
            (ends.not_found(false), "https://example.com/missing"),
            (ends.gone(false), "https://example.com/expired"),
            (ends.root(false), "https://example.com/"),
        ] {
            assert_eq!(res.status(), 302);
            assert_eq!(res.headers()[LOCATION], location);
            assert_eq!(res.headers()[CACHE_CONTROL], "no-store");
            assert!(body(res).await.is_empty());
        }
    }

    #[tokio::test]
    async fn root_falls_back_to_the_not_found_answer() {
        let ends = DeadEnds::new(&DeadEndTargets {
            not_found_url: Some("https://example.com/missing".into()),
            ..DeadEndTargets::default()
        })
        .unwrap();
        assert_eq!(ends.root(false).headers()[LOCATION], "https://example.com/missing");
        assert!(DeadEnds::new(&DeadEndTargets {
            root_url: Some("https://example.com/\n".into()),
            ..DeadEndTargets::default()
        })
        .is_err());
    }
}
