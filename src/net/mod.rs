//! Networking: the sans-IO HTTP/1.1 codec (`http`), the connection layer on mio (`conn`) and
//! the process-wide in-flight body budget (`budget`).

pub mod budget;
pub mod conn;
pub mod date;
pub mod http;
pub mod io;
pub mod listen;
pub mod tls;
