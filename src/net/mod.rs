//! Networking: the sans-IO HTTP/1.1 codec (`http`), a connection (`conn`) and a core's table of them with their deadlines (`conns`), a core's server side
//! over that table (`server`: accept to last write, yielding requests to a generic handler), the reactor (`io`) and
//! the process-wide in-flight body budget (`budget`); the outbound connection pool (`outbound`: connect, write a request,
//! read its response, keep-alive reuse) for whoever delivers requests, and its timers (`deadlines`).

pub mod budget;
pub mod conn;
pub mod conns;
pub mod date;
mod deadlines;
pub mod http;
pub mod io;
pub mod listen;
pub mod outbound;
pub mod server;
pub mod tls;
