//! Signing secrets: where they come from and how they are kept.
//!
//! A secret is named in the manifest, never written in it: `{ env = "GITHUB_SECRET" }` reads an
//! environment variable, `{ file = "/run/secrets/gh" }` reads a file (one trailing `\n` or
//! `\r\n` is dropped, as editors and `echo` add one). Both are read **once, at startup**; a
//! variable that is unset or empty, or a file that is missing, unreadable or empty, is a startup
//! error that names the variable or the file, never the value.
//!
//! [`Secret`] (`crate::sign::Secret`) holds the bytes. Its `Debug` prints
//! `Secret(<redacted, N bytes>)`, so a config dump or a panic message cannot leak it; nothing in
//! the crate formats a secret's bytes.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

/// The bytes of a secret (defined with the signing primitives that use it).
pub use crate::sign::Secret;

/// Where a secret is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable.
    Env(String),
    /// A file (for example a mounted Docker/Kubernetes secret).
    File(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(name) => write!(f, "environment variable {name}"),
            SecretSource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

impl SecretSource {
    /// Reads the secret; `env` is the process environment (injected so tests control it).
    /// The error names the source, never the value.
    pub fn load(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, String> {
        let bytes = match self {
            SecretSource::Env(name) => match env(name) {
                Some(v) => v.into_bytes(),
                None => return Err(format!("{self} is not set")),
            },
            SecretSource::File(path) => read_file(path).map_err(|e| format!("{self}: {e}"))?,
        };
        if bytes.is_empty() {
            return Err(format!("{self} is empty"));
        }
        Ok(Secret::new(bytes))
    }
}

/// Largest secret file read: a secret is a few dozen bytes; anything near this is a mistake
/// (a wrong path, a device).
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Reads a secret file: it must be a regular file (a FIFO, socket or device is refused without
/// blocking: the open is non-blocking and the type is checked on the open descriptor) of at
/// most [`MAX_SECRET_FILE_BYTES`]; the read itself is bounded too (a file growing meanwhile).
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.kind().to_string())?;
    let meta = file.metadata().map_err(|e| e.kind().to_string())?;
    if !meta.file_type().is_file() {
        return Err("is not a regular file".into());
    }
    let too_large = || format!("is larger than {MAX_SECRET_FILE_BYTES} bytes (64 KiB)");
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.kind().to_string())?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(too_large());
    }
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_and_file_sources() {
        let env = |k: &str| match k {
            "GH" => Some("s3cret".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            SecretSource::Env("GH".into()).load(&env).unwrap().expose(),
            b"s3cret"
        );
        let e = SecretSource::Env("NOPE".into()).load(&env).unwrap_err();
        assert_eq!(e, "environment variable NOPE is not set");
        let e = SecretSource::Env("EMPTY".into()).load(&env).unwrap_err();
        assert!(e.contains("EMPTY") && e.contains("empty"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gh");
        std::fs::write(&p, b"from-file\r\n").unwrap();
        let s = SecretSource::File(p.clone()).load(&env).unwrap();
        assert_eq!(s.expose(), b"from-file");
        let missing = dir.path().join("missing");
        let e = SecretSource::File(missing.clone()).load(&env).unwrap_err();
        assert!(e.contains(&missing.display().to_string()), "{e}");
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let env = |_: &str| None;
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 64 * 1024 + 1]).unwrap();
        let e = SecretSource::File(big).load(&env).unwrap_err();
        assert!(e.contains("larger than 65536"), "{e}");
        let max = dir.path().join("max");
        std::fs::write(&max, vec![b'a'; 64 * 1024]).unwrap();
        assert_eq!(
            SecretSource::File(max).load(&env).unwrap().expose().len(),
            65536
        );
        let e = SecretSource::File("/dev/zero".into())
            .load(&env)
            .unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = SecretSource::File(dir.path().to_path_buf())
            .load(&env)
            .unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A FIFO with no writer: refused at once, not a hang.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = SecretSource::File(fifo).load(&env).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn debug_is_redacted() {
        let s = Secret::new(b"hunter2".to_vec());
        let text = format!("{s:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(text, "Secret(<redacted, 7 bytes>)");
    }
}
