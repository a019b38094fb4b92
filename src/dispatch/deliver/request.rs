//! The request a delivery sends: the destination's fixed parts (`template`, built once per
//! configuration) and each attempt's `POST` (`encode`: raw body, its stored `content-type`,
//! Standard Webhooks id, timestamp and signature, sluice's attempt/trigger/replay headers, the
//! destination's configured headers). Split from [`crate::dispatch::deliver::dispatcher`], which decides when to
//! send it.
//!
//! A batched call (a [`crate::dispatch::deliver::batch`] carrier) is encoded the same way from its
//! carrier event: the batch JSON as body, `application/json`, `webhook-id` = the batch id, one
//! signature over the whole body; it has no `x-sluice-trigger` (its members may come from
//! several triggers: each names its own in the body).
#![forbid(unsafe_code)]

use crate::dispatch::job::Job;
use crate::dispatch::spec::DestinationSpec;
use crate::net::http::client::{RequestError, RequestTemplate};
use crate::net::http::decimal;

/// The fixed parts of `cfg`'s requests: `POST` to its handler, its configured headers last.
pub(crate) fn template(cfg: &DestinationSpec) -> Result<RequestTemplate, RequestError> {
    let trailing: Vec<(&str, &[u8])> = cfg
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    RequestTemplate::new(
        "POST",
        &cfg.handler.authority,
        &cfg.handler.path_and_query,
        &trailing,
    )
}

/// Appends the `POST` of `job` to `cfg`'s handler, sent at `ts_secs` (Unix seconds), to `out`:
/// `template`'s request line and `host`, the raw body's length, its stored `content-type`, the
/// Standard Webhooks id/timestamp (and signature when the destination has a signing key),
/// sluice's attempt/trigger/replay headers, then the destination's configured headers
/// (`template`'s) and the body. No allocation but the signature's and `out`'s growth.
pub(crate) fn encode(
    cfg: &DestinationSpec,
    template: &RequestTemplate,
    job: &Job,
    ts_secs: u64,
    out: &mut Vec<u8>,
) -> Result<(), RequestError> {
    let (mut ts_buf, mut attempt_buf) = ([0u8; 20], [0u8; 20]);
    let ts = decimal(&mut ts_buf, ts_secs).as_bytes();
    let attempt = decimal(&mut attempt_buf, u64::from(job.attempt)).as_bytes();
    let signature = cfg.signing_key.as_ref().map(|k| {
        crate::sign::standard_webhooks::sign(
            k.expose(),
            &job.event.event_id,
            ts_secs,
            &job.event.body,
        )
    });
    let content_type = job
        .event
        .headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map(|(_, v)| v.as_slice())
        .unwrap_or(b"application/octet-stream");
    let mut fields: [(&str, &[u8]); 8] = [
        ("content-type", content_type),
        ("webhook-id", job.event.event_id.as_bytes()),
        ("webhook-timestamp", ts),
        ("x-sluice-attempt", attempt),
        ("user-agent", b"sluice"),
        ("", b""),
        ("", b""),
        ("", b""),
    ];
    let mut n = 5;
    let batched = cfg.batch.is_some() && !job.batch.is_empty();
    if !batched {
        fields[n] = ("x-sluice-trigger", job.event.trigger_id.as_bytes());
        n += 1;
    }
    if let Some(r) = &job.event.replay_of {
        fields[n] = ("x-sluice-replay-of", r.as_bytes());
        n += 1;
    }
    if let Some(sig) = &signature {
        fields[n] = ("webhook-signature", sig.as_bytes());
        n += 1;
    }
    template.write(out, &fields[..n], &job.event.body)
}
