//! Networking: the sans-IO HTTP/1.1 codec (`http`) and the connection layer on mio (`conn`).

pub mod conn;
pub mod date;
pub mod http;
pub mod listen;
