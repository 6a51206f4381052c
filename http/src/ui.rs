//! `/ui`: the built-in web console (issue #20). A page and its script, style and chart code,
//! all compiled into the binary (`http/ui/`), served read-only to anyone who may read the admin
//! API. The page reads the node's own admin API (`/v1/...`) and `/metrics` and nothing else;
//! the Content-Security-Policy below makes the browser refuse any other origin, so the console
//! works on a machine with no internet and never leaks a request elsewhere. Its mutating
//! actions (create/delete a topic, change retention, add/remove a node) call the admin API like
//! the CLI does, with the admin token the operator types in (kept in the tab's
//! `sessionStorage`).

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;

/// One embedded file: its name under `/ui/`, media type and bytes.
struct Asset {
    name: &'static str,
    media_type: &'static str,
    body: &'static str,
}

/// One [`Asset`] from `http/ui/NAME`.
macro_rules! asset {
    ($name:literal, $media_type:literal) => {
        Asset {
            name: $name,
            media_type: $media_type,
            body: include_str!(concat!("../ui/", $name)),
        }
    };
}

/// Every file of the console (the whole page weight, well under 300 KB: see the test).
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("views.js", "text/javascript; charset=utf-8"),
    asset!("chart.js", "text/javascript; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
];

/// Only this node: scripts, styles and requests from the page's own origin, no frames, no
/// forms posted elsewhere.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The console's routes: `/ui` (redirects to `/ui/`), `/ui/` (the page) and `/ui/{file}`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { serve("index.html") }))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>| async move { serve(&file) }),
        )
        .layer(axum::middleware::map_response(with_policy))
}

/// Every answer under `/ui` (the redirect, 404s and 405s too) carries the policy.
async fn with_policy(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The total bytes of the console's files (what a first visit downloads).
pub fn page_weight() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

fn serve(name: &str) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no file {name} in the console (see /ui/)"),
        )
        .into_response();
    };
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(asset.media_type)),
            (CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            // The files change only with the binary; a short cache keeps upgrades visible.
            (CACHE_CONTROL, HeaderValue::from_static("max-age=60")),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
        ],
        asset.body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_served_with_its_type_and_the_policy() {
        for a in ASSETS {
            let r = serve(a.name);
            assert_eq!(r.status(), StatusCode::OK, "{}", a.name);
            assert_eq!(r.headers()[CONTENT_TYPE], a.media_type);
            assert_eq!(r.headers()[CONTENT_SECURITY_POLICY], POLICY);
        }
        assert_eq!(serve("../Cargo.toml").status(), StatusCode::NOT_FOUND);
        assert_eq!(serve("nope.js").status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_page_stays_small_and_names_no_other_origin() {
        assert!(page_weight() < 300 * 1024, "{} bytes", page_weight());
        for a in ASSETS {
            // SVG's namespace name is an identifier, never fetched.
            let body = a.body.replace("http://www.w3.org/2000/svg", "");
            for scheme in ["http://", "https://", "//cdn", "ws://", "wss://"] {
                assert!(
                    !body.contains(scheme),
                    "{} names another origin ({scheme})",
                    a.name
                );
            }
        }
    }
}
