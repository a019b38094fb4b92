//! Routing: request path and method → what the worker does with the request.
//!
//! Routes, in match order:
//! 1. `GET|HEAD /healthz`, `/readyz`, `/metrics`, `/ui`, `/api/v1/state`, `/api/v1/ledger`,
//!    `/api/v1/events/{id}` (the operational endpoints; the last four answer as `server.ui`
//!    says).
//! 2. Exact trigger paths from the manifest's `[[triggers]]` (`POST` only); the trigger's
//!    provider is the event's source.
//! 3. The embedded default route `POST /webhooks/{source}` when `ingest.default_route` is on
//!    (by default only without `[[triggers]]`); `source` must match `[A-Za-z0-9._-]{1,64}`, else
//!    `400`. Its events belong to the built-in trigger [`DEFAULT_TRIGGER_ID`] — except a source
//!    a trigger owns, compared ignoring ASCII case, so that no case variant of a verified
//!    trigger's path or source gets in unverified: a source that is the last segment of a
//!    trigger's path `/webhooks/{source}` goes to that trigger, else one equal to the source
//!    (`provider`) of exactly one trigger goes to that trigger; one named by several triggers
//!    is `404`.
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

use crate::ingest::spec::TriggerSpec;

/// `[A-Za-z0-9._-]{1,64}`: the shape of a source or trigger id (the default route answers
/// `400` to a source of any other shape; `config` refuses such trigger ids and providers).
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

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
    /// `POST /admin/dlq/{id}/discard`: remove a dead letter undelivered (id via
    /// [`dlq_discard_id`]); the `skip` of an `ordering` key stopped on it.
    DlqDiscard,
    /// `POST /admin/reload`: re-read and apply the configuration (`ops::reload`).
    Reload,
    /// A known admin path with the wrong method; the value is the `Allow` header.
    MethodNotAllowed(&'static str),
    /// Under `/admin/` but no such route.
    NotFound,
}

/// The `{id}` of `/admin/dlq/{id}/replay` (a path without its query), if it is that route.
pub fn dlq_replay_id(path: &str) -> Option<&str> {
    dlq_entry_id(path, "/replay")
}

/// The `{id}` of `/admin/dlq/{id}/discard`, if it is that route.
pub fn dlq_discard_id(path: &str) -> Option<&str> {
    dlq_entry_id(path, "/discard")
}

fn dlq_entry_id<'a>(path: &'a str, verb: &str) -> Option<&'a str> {
    let id = path.strip_prefix("/admin/dlq/")?.strip_suffix(verb)?;
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
    /// `GET /api/v1/ledger`: the event ledger per trigger (`dispatch::ledger`), with the access
    /// rule of `State`.
    Ledger,
    /// `GET /api/v1/events/{id}`: one event's status and attempts (`ops::events_api`).
    Event,
    /// `GET /api/v1/events?…`: recent events, newest first, a page at a time
    /// (`ops::events_api`).
    Events,
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

/// Which trigger owns a default-route source (module docs, rule 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    One(usize),
    Several,
}

/// Immutable routing table built from the config.
#[derive(Debug, Clone)]
pub struct Router {
    /// path → index into `ids`.
    triggers: HashMap<String, usize>,
    /// (trigger id, source) per trigger, config order.
    ids: Vec<(String, String)>,
    /// Lower-cased `{source}` of trigger paths `/webhooks/{source}` → owner.
    path_owner: HashMap<String, Owner>,
    /// Lower-cased trigger sources → owner.
    source_owner: HashMap<String, Owner>,
    default_route: bool,
    admin: bool,
}

/// Adds `key` → trigger `i` to `map`, or marks the key as owned by several.
fn own(map: &mut HashMap<String, Owner>, key: String, i: usize) {
    map.entry(key)
        .and_modify(|o| {
            if *o != Owner::One(i) {
                *o = Owner::Several
            }
        })
        .or_insert(Owner::One(i));
}

const ALLOW_GET: &str = "GET, HEAD";
const ALLOW_POST: &str = "POST";

impl Router {
    pub fn new(triggers: &[TriggerSpec], default_route: bool) -> Router {
        let mut r = Router {
            triggers: HashMap::new(),
            ids: Vec::new(),
            path_owner: HashMap::new(),
            source_owner: HashMap::new(),
            default_route,
            admin: false,
        };
        for (i, t) in triggers.iter().enumerate() {
            r.triggers.insert(t.path.clone(), i);
            r.ids.push((t.id.clone(), t.provider.clone()));
            if let Some(source) = t.path.strip_prefix(DEFAULT_ROUTE_PREFIX) {
                own(&mut r.path_owner, source.to_ascii_lowercase(), i);
            }
            own(&mut r.source_owner, t.provider.to_ascii_lowercase(), i);
        }
        r
    }

    /// The default route's answer for a valid `source` (module docs, rule 3).
    fn default_route<'a>(&'a self, source: &'a str) -> RouteMatch<'a> {
        // A valid source is at most 64 ASCII bytes: lower-cased on the stack.
        let mut buf = [0u8; 64];
        let lower = &mut buf[..source.len()];
        lower.copy_from_slice(source.as_bytes());
        lower.make_ascii_lowercase();
        let lower = std::str::from_utf8(lower).unwrap_or(source);
        let owner = self
            .path_owner
            .get(lower)
            .or_else(|| self.source_owner.get(lower));
        match owner {
            None => RouteMatch::Ingest {
                trigger_id: DEFAULT_TRIGGER_ID,
                source,
            },
            Some(&Owner::One(i)) => self.ingest(i),
            Some(Owner::Several) => RouteMatch::NotFound,
        }
    }

    fn ingest(&self, i: usize) -> RouteMatch<'_> {
        let (id, source) = &self.ids[i];
        RouteMatch::Ingest {
            trigger_id: id,
            source,
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
            "/api/v1/ledger" => Some(OpsEndpoint::Ledger),
            "/api/v1/events" => Some(OpsEndpoint::Events),
            _ if path.starts_with("/api/v1/events/") => Some(OpsEndpoint::Event),
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
                    _ if dlq_discard_id(path).is_some() && is_post => AdminRoute::DlqDiscard,
                    _ if dlq_discard_id(path).is_some() => AdminRoute::MethodNotAllowed(ALLOW_POST),
                    _ => AdminRoute::NotFound,
                });
            }
        }
        if let Some(&i) = self.triggers.get(path) {
            return if is_post {
                self.ingest(i)
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
                    self.default_route(source)
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
        Router::new(&[TriggerSpec::plain("gh", "github", "/hooks/gh")], true)
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
            r.route("GET", "/api/v1/ledger"),
            RouteMatch::Ops(OpsEndpoint::Ledger)
        );
        assert_eq!(
            r.route("GET", "/api/v1/events/01ABC?body=1"),
            RouteMatch::Ops(OpsEndpoint::Event)
        );
        assert_eq!(
            r.route("GET", "/api/v1/events?limit=5&cursor=x"),
            RouteMatch::Ops(OpsEndpoint::Events)
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

    fn trigger(id: &str, provider: &str, path: &str) -> TriggerSpec {
        TriggerSpec::plain(id, provider, path)
    }

    #[test]
    fn id_shape() {
        assert!(is_valid_id("github.com_x-1"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id(&"a".repeat(65)));
        assert!(is_valid_id(&"a".repeat(64)));
    }

    #[test]
    fn a_source_a_trigger_owns_goes_to_that_trigger_whatever_its_case() {
        let r = Router::new(
            &[
                trigger("gh", "gh-main", "/webhooks/github"),
                trigger("st", "stripe", "/hooks/stripe"),
                trigger("a1", "acme", "/hooks/a1"),
                trigger("a2", "acme", "/hooks/a2"),
            ],
            true,
        );
        let to = |id| RouteMatch::Ingest {
            trigger_id: id,
            source: match id {
                "gh" => "gh-main",
                _ => "stripe",
            },
        };
        // A case variant of a trigger's path, and its source in any case.
        assert_eq!(r.route("POST", "/webhooks/GitHub"), to("gh"));
        assert_eq!(r.route("POST", "/webhooks/github"), to("gh"));
        assert_eq!(r.route("POST", "/webhooks/GH-Main"), to("gh"));
        assert_eq!(r.route("POST", "/webhooks/STRIPE"), to("st"));
        // A source two triggers have: neither, and not the default route either.
        assert_eq!(r.route("POST", "/webhooks/Acme"), RouteMatch::NotFound);
        // Any other source is the default route's, its case kept.
        assert_eq!(
            r.route("POST", "/webhooks/Other"),
            RouteMatch::Ingest {
                trigger_id: DEFAULT_TRIGGER_ID,
                source: "Other"
            }
        );
        // Off: only the exact trigger paths.
        let off = Router::new(&[trigger("gh", "github", "/webhooks/github")], false);
        assert_eq!(off.route("POST", "/webhooks/GitHub"), RouteMatch::NotFound);
        assert_eq!(off.route("POST", "/webhooks/github"), {
            RouteMatch::Ingest {
                trigger_id: "gh",
                source: "github",
            }
        });
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
        assert_eq!(dlq_discard_id("/admin/dlq/01ABC/discard"), Some("01ABC"));
        assert_eq!(dlq_discard_id("/admin/dlq/01ABC/replay"), None);
        assert_eq!(dlq_discard_id("/admin/dlq//discard"), None);
    }
}
