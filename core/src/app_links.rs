//! App links (docs/spec.md §14): per domain, the documents that let a mobile app open the
//! domain's links, served by the redirect port at fixed paths: Apple's app-site-association
//! (a JSON object) and Android's Digital Asset Links statement list (a JSON array).
//!
//! The control plane checks a document's top-level shape and its size, and keeps it as its
//! compact JSON text: the bytes the redirect port serves, built into its answer once when
//! the domains are loaded, never per request.

use serde_json::Value;

/// Longest document kept, in bytes of its compact JSON (Apple reads at most 128 KB).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// The two documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppLinkDocument {
    /// `/.well-known/apple-app-site-association`: a JSON object.
    AppleAppSiteAssociation,
    /// `/.well-known/assetlinks.json`: a JSON array of statements.
    Assetlinks,
}

impl AppLinkDocument {
    pub const ALL: [AppLinkDocument; 2] = [AppLinkDocument::AppleAppSiteAssociation, AppLinkDocument::Assetlinks];

    /// Where the redirect port serves it.
    pub const fn path(self) -> &'static str {
        match self {
            AppLinkDocument::AppleAppSiteAssociation => "/.well-known/apple-app-site-association",
            AppLinkDocument::Assetlinks => "/.well-known/assetlinks.json",
        }
    }

    /// Its field in the API.
    pub const fn field(self) -> &'static str {
        match self {
            AppLinkDocument::AppleAppSiteAssociation => "apple_app_site_association",
            AppLinkDocument::Assetlinks => "assetlinks",
        }
    }

    /// The document served at `path` (a request's path, without its query), if any. No
    /// code is either path (`.` is not a code character): only a path already refused as a
    /// code is asked.
    pub fn at(path: &str) -> Option<AppLinkDocument> {
        AppLinkDocument::ALL.into_iter().find(|d| d.path() == path)
    }
}

/// A domain's app links: each document's compact JSON text, or `None` when it has none
/// (the redirect port answers that path as any other that is no code: 404).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppLinks {
    pub apple_app_site_association: Option<String>,
    pub assetlinks: Option<String>,
}

impl AppLinks {
    /// The text of `document`, if set.
    pub fn get(&self, document: AppLinkDocument) -> Option<&str> {
        match document {
            AppLinkDocument::AppleAppSiteAssociation => self.apple_app_site_association.as_deref(),
            AppLinkDocument::Assetlinks => self.assetlinks.as_deref(),
        }
    }

    /// Whether neither document is set.
    pub fn is_empty(&self) -> bool {
        self.apple_app_site_association.is_none() && self.assetlinks.is_none()
    }
}

/// Why a document is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppLinkError {
    #[error("apple_app_site_association must be a JSON object")]
    NotAnObject,
    #[error("assetlinks must be a JSON array of statements")]
    NotAnArray,
    #[error("assetlinks[{0}] must be an object with \"relation\" (a non-empty array of strings) and \"target\" (an object with a string \"namespace\")")]
    BadStatement(usize),
    #[error("{field} is {bytes} bytes as compact JSON; at most {max} are kept", max = MAX_DOCUMENT_BYTES)]
    TooLarge { field: &'static str, bytes: usize },
}

/// `value` checked as `document` and made its compact JSON text: Apple's is an object; an
/// asset links list is an array of statements, each an object with `relation` (a non-empty
/// array of strings) and `target` (an object with a string `namespace`); at most
/// [`MAX_DOCUMENT_BYTES`] either.
pub fn document_text(document: AppLinkDocument, value: &Value) -> Result<String, AppLinkError> {
    match document {
        AppLinkDocument::AppleAppSiteAssociation if !value.is_object() => return Err(AppLinkError::NotAnObject),
        AppLinkDocument::AppleAppSiteAssociation => {}
        AppLinkDocument::Assetlinks => {
            let statements = value.as_array().ok_or(AppLinkError::NotAnArray)?;
            if let Some(i) = statements.iter().position(|s| !is_statement(s)) {
                return Err(AppLinkError::BadStatement(i));
            }
        }
    }
    let text = value.to_string();
    match text.len() > MAX_DOCUMENT_BYTES {
        true => Err(AppLinkError::TooLarge {
            field: document.field(),
            bytes: text.len(),
        }),
        false => Ok(text),
    }
}

/// Whether `s` is a Digital Asset Links statement as far as its shape goes.
fn is_statement(s: &Value) -> bool {
    let relation = s
        .get("relation")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty() && r.iter().all(Value::is_string));
    let target = s
        .get("target")
        .filter(|t| t.is_object())
        .and_then(|t| t.get("namespace"))
        .is_some_and(Value::is_string);
    s.is_object() && relation && target
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_of_the_right_shape_are_kept_compact_and_the_rest_refused() {
        use AppLinkDocument::{AppleAppSiteAssociation as Apple, Assetlinks as Android};
        let statement = json!({
            "relation": ["delegate_permission/common.handle_all_urls"],
            "target": {"namespace": "android_app", "package_name": "com.acme",
                       "sha256_cert_fingerprints": ["14:6D:E9"]}
        });
        let aasa = json!({"applinks": {"details": [{"appIDs": ["ABCDE12345.com.acme"], "components": [{"/": "/*"}]}]}});
        let cases: Vec<(AppLinkDocument, Value, Result<(), AppLinkError>)> = vec![
            (Apple, aasa.clone(), Ok(())),
            (Apple, json!({}), Ok(())),
            (Apple, json!([aasa]), Err(AppLinkError::NotAnObject)),
            (Apple, json!("{}"), Err(AppLinkError::NotAnObject)),
            (Apple, json!(null), Err(AppLinkError::NotAnObject)),
            (Android, json!([statement]), Ok(())),
            (Android, json!([]), Ok(())),
            (Android, statement.clone(), Err(AppLinkError::NotAnArray)),
            (Android, json!([statement, 1]), Err(AppLinkError::BadStatement(1))),
            (
                Android,
                json!([{"target": statement["target"]}]),
                Err(AppLinkError::BadStatement(0)),
            ),
            (
                Android,
                json!([{"relation": [], "target": statement["target"]}]),
                Err(AppLinkError::BadStatement(0)),
            ),
            (
                Android,
                json!([{"relation": "delegate_permission/common.handle_all_urls", "target": statement["target"]}]),
                Err(AppLinkError::BadStatement(0)),
            ),
            (
                Android,
                json!([{"relation": [1], "target": statement["target"]}]),
                Err(AppLinkError::BadStatement(0)),
            ),
            (
                Android,
                json!([statement, {"relation": statement["relation"], "target": {"package_name": "x"}}]),
                Err(AppLinkError::BadStatement(1)),
            ),
            (
                Android,
                json!([{"relation": statement["relation"], "target": ["android_app"]}]),
                Err(AppLinkError::BadStatement(0)),
            ),
        ];
        for (document, value, want) in cases {
            let got = document_text(document, &value);
            assert_eq!(
                got.as_ref().map(|_| ()),
                want.as_ref().map(|_| ()),
                "{document:?} {value}"
            );
            if let Ok(text) = got {
                assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value, "the same value");
            }
        }
        let pretty: Value = serde_json::from_str("{\n  \"applinks\": {\n    \"details\": [ ]\n  }\n}").unwrap();
        assert_eq!(
            document_text(Apple, &pretty).as_deref(),
            Ok(r#"{"applinks":{"details":[]}}"#),
            "compact"
        );
    }

    #[test]
    fn a_document_is_bounded_in_bytes_of_its_compact_text() {
        // `{"k":"…"}`: 8 bytes around the string.
        let sized = |n: usize| json!({ "k": "x".repeat(n - 8) });
        let text = document_text(AppLinkDocument::AppleAppSiteAssociation, &sized(MAX_DOCUMENT_BYTES)).unwrap();
        assert_eq!(text.len(), MAX_DOCUMENT_BYTES);
        assert_eq!(
            document_text(AppLinkDocument::AppleAppSiteAssociation, &sized(MAX_DOCUMENT_BYTES + 1)),
            Err(AppLinkError::TooLarge {
                field: "apple_app_site_association",
                bytes: MAX_DOCUMENT_BYTES + 1
            })
        );
        let statement =
            json!({"relation": ["r"], "target": {"namespace": "web", "site": "x".repeat(MAX_DOCUMENT_BYTES)}});
        let e = document_text(AppLinkDocument::Assetlinks, &json!([statement])).unwrap_err();
        assert!(
            matches!(
                e,
                AppLinkError::TooLarge {
                    field: "assetlinks",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("assetlinks is "), "{e}");
    }

    #[test]
    fn each_document_has_its_path_and_no_path_is_a_code() {
        for d in AppLinkDocument::ALL {
            assert_eq!(AppLinkDocument::at(d.path()), Some(d));
            assert!(!crate::code::is_valid_code(&d.path().as_bytes()[1..]), "{d:?}");
        }
        for other in [
            "/.well-known/apple-app-site-association/",
            "/.well-known/assetlinks",
            "/.well-known/acme-challenge/x",
            "/apple-app-site-association",
            "/.WELL-KNOWN/assetlinks.json",
        ] {
            assert_eq!(AppLinkDocument::at(other), None, "{other}");
        }
    }
}
