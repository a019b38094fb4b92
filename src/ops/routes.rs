//! What a core does with a request that is not an ingest ([`plan`]): the operational and admin
//! routes decided in one place, from the route, the request's `Authorization` and what the
//! node says of its readiness — answered at once ([`Plan::Answer`]: `/healthz`, `/readyz`,
//! `/admin/ping`, the admin gate's `401`, the router's `405`/`400`/`404`), or handed on to the
//! part of the core that serves it (a read to the readers, a scrape to the turn's shared
//! rendering, a DLQ route to `dispatch::dlq::online`, a reload to [`crate::ops::reload`]).
//!
//! Every `/admin/…` route is behind the bearer token (`[server] admin_token`; none set: every
//! admin route is `401`), checked here before the route is looked at.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use crate::ingest::router::{dlq_discard_id, dlq_replay_id, AdminRoute, OpsEndpoint, RouteMatch};
use crate::ingest::verify::bearer_matches;
use crate::metrics::Route;
use crate::sign::Secret;

/// `text/plain` with the charset the answers use.
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

/// A complete answer, before framing (its body static but for `/readyz`'s reason).
#[derive(Debug, PartialEq, Eq)]
pub struct Fixed {
    pub route: Route,
    pub status: u16,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Cow<'static, [u8]>,
}

/// What the core does with a request that is not an ingest.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan<'a> {
    /// Answer it at once.
    Answer(Fixed),
    /// A log scan or a state rendering: to the readers (`sched::readers`).
    Read(OpsEndpoint),
    /// `GET /ui`: the page (`ops::dashboard`).
    Page,
    /// `GET /metrics`: one rendering for every scrape of the turn.
    Scrape,
    /// `POST /admin/dlq/{id}/replay`, the token checked.
    ReplayOne(&'a str),
    /// `POST /admin/dlq/replay?…`, the token checked.
    BulkReplay,
    /// `POST /admin/dlq/{id}/discard`, the token checked.
    Discard(&'a str),
    /// `POST /admin/reload`, the token checked.
    Reload,
    /// An ingest route: the front's, not this plan's.
    Ingest,
}

/// The plan for `route` (path `path`, its `Authorization` value `authorization`), with the
/// node's `admin_token` and its readiness (`not_ready`: the reason `/readyz` gives, if any).
pub fn plan<'a>(
    route: RouteMatch<'_>,
    path: &'a str,
    authorization: Option<&[u8]>,
    admin_token: Option<&Secret>,
    not_ready: impl FnOnce() -> Option<&'static str>,
) -> Plan<'a> {
    let text = |route, status, body: Cow<'static, [u8]>| {
        Plan::Answer(Fixed {
            route,
            status,
            headers: vec![("Content-Type", TEXT)],
            body,
        })
    };
    match route {
        RouteMatch::Ops(OpsEndpoint::Healthz) => text(Route::Healthz, 200, Cow::Borrowed(b"ok\n")),
        RouteMatch::Ops(OpsEndpoint::Readyz) => match not_ready() {
            None => text(Route::Readyz, 200, Cow::Borrowed(b"ready\n")),
            Some(reason) => text(
                Route::Readyz,
                503,
                format!("{reason}\n").into_bytes().into(),
            ),
        },
        RouteMatch::Ops(OpsEndpoint::Metrics) => Plan::Scrape,
        RouteMatch::Ops(OpsEndpoint::Ui) => Plan::Page,
        RouteMatch::Ops(ep) => Plan::Read(ep),
        RouteMatch::Admin(route) => {
            let authorized = admin_token.is_some_and(|t| bearer_matches(t, authorization));
            admin(route, path, authorized)
        }
        RouteMatch::MethodNotAllowed(allow) => Plan::Answer(Fixed {
            route: Route::Unmatched,
            status: 405,
            headers: vec![("Allow", allow), ("Content-Type", TEXT)],
            body: Cow::Borrowed(b"method not allowed\n"),
        }),
        RouteMatch::BadSource => text(
            Route::Webhook,
            400,
            Cow::Borrowed(b"invalid source: must match [A-Za-z0-9._-]{1,64}\n"),
        ),
        RouteMatch::NotFound => text(Route::Unmatched, 404, Cow::Borrowed(b"not found\n")),
        RouteMatch::Ingest { .. } => Plan::Ingest,
    }
}

/// An admin route, the token checked (`authorized`).
fn admin(route: AdminRoute, path: &str, authorized: bool) -> Plan<'_> {
    let json = |status, extra: Option<(&'static str, &'static str)>, body: &'static [u8]| {
        let mut headers = vec![("Content-Type", JSON)];
        headers.extend(extra);
        Plan::Answer(Fixed {
            route: Route::Admin,
            status,
            headers,
            body: Cow::Borrowed(body),
        })
    };
    match route {
        _ if !authorized => json(
            401,
            Some(("WWW-Authenticate", "Bearer")),
            br#"{"status":"refused","reason":"unauthorized"}"#,
        ),
        AdminRoute::Ping => json(200, None, br#"{"status":"ok"}"#),
        AdminRoute::DlqReplay => Plan::ReplayOne(dlq_replay_id(path).unwrap_or("")),
        AdminRoute::DlqBulkReplay => Plan::BulkReplay,
        AdminRoute::DlqDiscard => Plan::Discard(dlq_discard_id(path).unwrap_or("")),
        AdminRoute::Reload => Plan::Reload,
        AdminRoute::MethodNotAllowed(allow) => json(405, Some(("Allow", allow)), b"{}"),
        AdminRoute::NotFound => json(404, None, br#"{"status":"not_found"}"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(route: RouteMatch<'_>, auth: Option<&[u8]>) -> Plan<'static> {
        let token = Secret::new("s3cret");
        plan(route, "/admin/dlq/01ABC/replay", auth, Some(&token), || {
            None
        })
    }

    #[test]
    fn probes_answer_at_once_and_readyz_gives_the_reason() {
        let Plan::Answer(ok) = plan_of(RouteMatch::Ops(OpsEndpoint::Healthz), None) else {
            panic!("answered at once")
        };
        assert_eq!((ok.status, &ok.body[..]), (200, &b"ok\n"[..]));
        let not_ready = plan(
            RouteMatch::Ops(OpsEndpoint::Readyz),
            "/readyz",
            None,
            None,
            || Some("draining"),
        );
        let Plan::Answer(r) = not_ready else {
            panic!("answered at once")
        };
        assert_eq!((r.status, &r.body[..]), (503, &b"draining\n"[..]));
        assert_eq!(
            plan_of(RouteMatch::Ops(OpsEndpoint::Events), None),
            Plan::Read(OpsEndpoint::Events)
        );
        assert_eq!(
            plan_of(RouteMatch::Ops(OpsEndpoint::Metrics), None),
            Plan::Scrape
        );
    }

    #[test]
    fn every_admin_route_is_behind_the_token() {
        for route in [
            AdminRoute::Ping,
            AdminRoute::DlqReplay,
            AdminRoute::DlqBulkReplay,
            AdminRoute::DlqDiscard,
            AdminRoute::Reload,
            AdminRoute::NotFound,
        ] {
            for auth in [None, Some(&b"Bearer wrong"[..])] {
                let Plan::Answer(a) = plan_of(RouteMatch::Admin(route), auth) else {
                    panic!("{route:?} without the token is refused")
                };
                assert_eq!(a.status, 401, "{route:?}");
                assert!(a.headers.contains(&("WWW-Authenticate", "Bearer")));
            }
        }
        let no_token = plan(
            RouteMatch::Admin(AdminRoute::Ping),
            "/admin/ping",
            Some(b"Bearer s3cret"),
            None,
            || None,
        );
        assert!(
            matches!(no_token, Plan::Answer(Fixed { status: 401, .. })),
            "no token set: every admin route is refused"
        );
        let auth = Some(&b"Bearer s3cret"[..]);
        assert_eq!(
            plan_of(RouteMatch::Admin(AdminRoute::DlqReplay), auth),
            Plan::ReplayOne("01ABC")
        );
        assert_eq!(
            plan_of(RouteMatch::Admin(AdminRoute::Reload), auth),
            Plan::Reload
        );
    }

    #[test]
    fn the_routers_refusals_name_what_is_wrong() {
        let Plan::Answer(a) = plan_of(RouteMatch::MethodNotAllowed("GET, HEAD"), None) else {
            panic!()
        };
        assert_eq!(a.status, 405);
        assert!(a.headers.contains(&("Allow", "GET, HEAD")));
        let Plan::Answer(b) = plan_of(RouteMatch::BadSource, None) else {
            panic!()
        };
        assert_eq!((b.status, b.route), (400, Route::Webhook));
        let Plan::Answer(n) = plan_of(RouteMatch::NotFound, None) else {
            panic!()
        };
        assert_eq!(n.status, 404);
    }
}
