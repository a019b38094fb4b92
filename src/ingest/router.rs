//! Routing: request path and method → what the worker does with the request.
//!
//! Routes, in match order:
//! 1. `GET|HEAD /healthz`, `/readyz`, `/metrics`, `/ui`, `/api/v1/state` (the operational
//!    endpoints; the last two answer as `server.ui` says).
//! 2. Exact trigger paths from the manifest's `[[triggers]]` (`POST` only); the trigger's
//!    provider is the event's source.
//! 3. The embedded default route `POST /webhooks/{source}` (unless `ingest.default_route =
//!    false`); `source` must match `[A-Za-z0-9._-]{1,64}`, else `400`. Its events belong to the
//!    built-in trigger [`DEFAULT_TRIGGER_ID`].
//!
//! 4. `/admin/…` when the admin routes are on ([`Router::with_admin`], i.e. `SLUICE_ADMIN_TOKEN`
//!    is set): [`RouteMatch::Admin`]. The worker checks the bearer token *before* looking at the
//!    admin route, so without the token every `/admin/` path is `401` (nothing to enumerate).
//!    When the admin routes are off, every `/admin/` path is `404`. Admin endpoints:
//!    `GET /admin/ping` (the DLQ replay route will join it).
//!
//! A known path with the wrong method is `405` with `Allow`; anything else is `404`.
//! The query string is ignored for matching.

use std::collections::HashMap;

use crate::config::{is_valid_id, TriggerConfig};

/// Trigger id of events received on the embedded `POST /webhooks/{source}` route.
pub const DEFAULT_TRIGGER_ID: &str = "default";

/// Prefix of the embedded route.
pub const DEFAULT_ROUTE_PREFIX: &str = "/webhooks/";

/// Prefix of the admin routes.
pub const ADMIN_PREFIX: &str = "/admin/";

/// Path prefixes reserved for built-in routes that later issues add (a web UI, an API): the
/// prefix itself without its trailing slash is reserved too (`/ui`, `/ui/…`, `/api`, `/api/…`).
pub const RESERVED_PREFIXES: [&str; 2] = ["/ui/", "/api/"];

/// The built-in route a trigger `path` would collide with, if any: the operational endpoints,
/// `/admin` and everything under `/admin/`, and [`RESERVED_PREFIXES`]. A trigger on such a path
/// would never be reached (or would capture a later built-in route), so the config refuses it.
pub fn reserved_route(path: &str) -> Option<&'static str> {
    match path {
        "/healthz" => return Some("/healthz"),
        "/readyz" => return Some("/readyz"),
        "/metrics" => return Some("/metrics"),
        _ => {}
    }
    [ADMIN_PREFIX]
        .into_iter()
        .chain(RESERVED_PREFIXES)
        .find(|p| path.starts_with(p) || path == p.trim_end_matches('/'))
}

/// An admin route, resolved before authentication (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRoute {
    /// `GET|HEAD /admin/ping` → 200.
    Ping,
    /// `POST /admin/dlq/{id}/replay`: replay a dead-lettered event (id via [`dlq_replay_id`]).
    DlqReplay,
    /// `POST /admin/dlq/replay?reason=&trigger=&since=`: replay every matching dead letter.
    DlqBulkReplay,
    /// `POST /admin/reload`: re-read and apply the configuration (`ops::reload`).
    Reload,
    /// A known admin path with the wrong method; the value is the `Allow` header.
    MethodNotAllowed(&'static str),
    /// Under `/admin/` but no such route.
    NotFound,
}

/// The `{id}` of `/admin/dlq/{id}/replay` (a path without its query), if it is that route.
pub fn dlq_replay_id(path: &str) -> Option<&str> {
    let id = path.strip_prefix("/admin/dlq/")?.strip_suffix("/replay")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The operational endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpsEndpoint {
    Healthz,
    Readyz,
    Metrics,
    /// `GET /ui`: the dashboard page (`crate::ops::dashboard`; `server.ui` decides access).
    Ui,
    /// `GET /api/v1/state`: the dashboard's JSON.
    State,
}

/// What a request resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteMatch<'a> {
    Ops(OpsEndpoint),
    /// Under `/admin/` with the admin routes on (token not yet checked).
    Admin(AdminRoute),
    Ingest {
        trigger_id: &'a str,
        source: &'a str,
    },
    /// The path exists but the method does not; the value is the `Allow` header.
    MethodNotAllowed(&'static str),
    /// `/webhooks/{source}` with a source that is not `[A-Za-z0-9._-]{1,64}`.
    BadSource,
    NotFound,
}

/// Immutable routing table built from the config.
#[derive(Debug, Clone)]
pub struct Router {
    triggers: HashMap<String, (String, String)>,
    default_route: bool,
    admin: bool,
}

const ALLOW_GET: &str = "GET, HEAD";
const ALLOW_POST: &str = "POST";

impl Router {
    pub fn new(triggers: &[TriggerConfig], default_route: bool) -> Router {
        let triggers = triggers
            .iter()
            .map(|t| (t.path.clone(), (t.id.clone(), t.provider.clone())))
            .collect();
        Router {
            triggers,
            default_route,
            admin: false,
        }
    }

    /// Turns the `/admin/` routes on (they are off, i.e. `404`, by default).
    pub fn with_admin(mut self, on: bool) -> Router {
        self.admin = on;
        self
    }

    /// Resolves `method` + `path` (the request target without its query).
    pub fn route<'a>(&'a self, method: &str, target: &'a str) -> RouteMatch<'a> {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let is_get = method == "GET" || method == "HEAD";
        let is_post = method == "POST";
        let ops = match path {
            "/healthz" => Some(OpsEndpoint::Healthz),
            "/readyz" => Some(OpsEndpoint::Readyz),
            "/metrics" => Some(OpsEndpoint::Metrics),
            "/ui" => Some(OpsEndpoint::Ui),
            "/api/v1/state" => Some(OpsEndpoint::State),
            _ => None,
        };
        if let Some(ep) = ops {
            return if is_get {
                RouteMatch::Ops(ep)
            } else {
                RouteMatch::MethodNotAllowed(ALLOW_GET)
            };
        }
        if self.admin {
            if let Some(rest) = path.strip_prefix(ADMIN_PREFIX) {
                return RouteMatch::Admin(match rest {
                    "ping" if is_get => AdminRoute::Ping,
                    "ping" => AdminRoute::MethodNotAllowed(ALLOW_GET),
                    "reload" if is_post => AdminRoute::Reload,
                    "reload" => AdminRoute::MethodNotAllowed(ALLOW_POST),
                    "dlq/replay" if is_post => AdminRoute::DlqBulkReplay,
                    "dlq/replay" => AdminRoute::MethodNotAllowed(ALLOW_POST),
                    _ if dlq_replay_id(path).is_some() && is_post => AdminRoute::DlqReplay,
                    _ if dlq_replay_id(path).is_some() => AdminRoute::MethodNotAllowed(ALLOW_POST),
                    _ => AdminRoute::NotFound,
                });
            }
        }
        if let Some((id, provider)) = self.triggers.get(path) {
            return if is_post {
                RouteMatch::Ingest {
                    trigger_id: id,
                    source: provider,
                }
            } else {
                RouteMatch::MethodNotAllowed(ALLOW_POST)
            };
        }
        if self.default_route {
            if let Some(source) = path.strip_prefix(DEFAULT_ROUTE_PREFIX) {
                if !is_post {
                    return RouteMatch::MethodNotAllowed(ALLOW_POST);
                }
                return if is_valid_id(source) {
                    RouteMatch::Ingest {
                        trigger_id: DEFAULT_TRIGGER_ID,
                        source,
                    }
                } else {
                    RouteMatch::BadSource
                };
            }
        }
        RouteMatch::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router {
        Router::new(
            &[TriggerConfig {
                id: "gh".into(),
                provider: "github".into(),
                path: "/hooks/gh".into(),
                handler: None,
                auth: Default::default(),
                flow: Default::default(),
                when_backlog_full: crate::ingest::backlog::WhenFull::Refuse,
                max_pending: Default::default(),
            }],
            true,
        )
    }

    #[test]
    fn routes() {
        let r = router();
        assert_eq!(
            r.route("GET", "/healthz"),
            RouteMatch::Ops(OpsEndpoint::Healthz)
        );
        assert_eq!(
            r.route("HEAD", "/readyz?x=1"),
            RouteMatch::Ops(OpsEndpoint::Readyz)
        );
        assert_eq!(
            r.route("POST", "/metrics"),
            RouteMatch::MethodNotAllowed("GET, HEAD")
        );
        assert_eq!(
            r.route("POST", "/hooks/gh?delivery=1"),
            RouteMatch::Ingest {
                trigger_id: "gh",
                source: "github"
            }
        );
        assert_eq!(
            r.route("GET", "/hooks/gh"),
            RouteMatch::MethodNotAllowed("POST")
        );
        assert_eq!(
            r.route("POST", "/webhooks/stripe.prod-1"),
            RouteMatch::Ingest {
                trigger_id: DEFAULT_TRIGGER_ID,
                source: "stripe.prod-1"
            }
        );
        assert_eq!(r.route("POST", "/webhooks/"), RouteMatch::BadSource);
        assert_eq!(r.route("POST", "/webhooks/a/b"), RouteMatch::BadSource);
        assert_eq!(
            r.route("POST", &format!("/webhooks/{}", "x".repeat(65))),
            RouteMatch::BadSource
        );
        assert_eq!(
            r.route("PUT", "/webhooks/x"),
            RouteMatch::MethodNotAllowed("POST")
        );
        assert_eq!(r.route("POST", "/nope"), RouteMatch::NotFound);
        assert_eq!(r.route("GET", "/"), RouteMatch::NotFound);
    }

    #[test]
    fn admin_routes_only_when_on() {
        let off = router();
        assert_eq!(off.route("GET", "/admin/ping"), RouteMatch::NotFound);
        let on = router().with_admin(true);
        assert_eq!(
            on.route("GET", "/admin/ping?x"),
            RouteMatch::Admin(AdminRoute::Ping)
        );
        assert_eq!(
            on.route("POST", "/admin/ping"),
            RouteMatch::Admin(AdminRoute::MethodNotAllowed("GET, HEAD"))
        );
        assert_eq!(
            on.route("GET", "/admin/nope"),
            RouteMatch::Admin(AdminRoute::NotFound)
        );
        assert_eq!(on.route("GET", "/admin"), RouteMatch::NotFound);
        assert_eq!(
            on.route("GET", "/metrics"),
            RouteMatch::Ops(OpsEndpoint::Metrics)
        );
    }

    #[test]
    fn reserved_routes() {
        for p in [
            "/healthz",
            "/readyz",
            "/metrics",
            "/admin",
            "/admin/",
            "/admin/x",
            "/ui",
            "/ui/x",
            "/api",
            "/api/v1/events",
        ] {
            assert!(reserved_route(p).is_some(), "{p}");
        }
        for p in [
            "/hooks/gh",
            "/healthz2",
            "/metrics/x",
            "/administrator",
            "/apix",
            "/",
        ] {
            assert_eq!(reserved_route(p), None, "{p}");
        }
    }

    #[test]
    fn default_route_can_be_disabled() {
        let r = Router::new(&[], false);
        assert_eq!(r.route("POST", "/webhooks/x"), RouteMatch::NotFound);
    }

    #[test]
    fn dlq_replay_route() {
        assert_eq!(dlq_replay_id("/admin/dlq/01ABC/replay"), Some("01ABC"));
        assert_eq!(dlq_replay_id("/admin/dlq//replay"), None);
        assert_eq!(dlq_replay_id("/admin/dlq/a/b/replay"), None);
        assert_eq!(dlq_replay_id("/admin/dlq/a"), None);
    }
}
