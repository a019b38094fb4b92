//! A real headless Chromium driven over the W3C WebDriver protocol by `chromedriver` (Debian
//! `chromium` + `chromium-driver`, installed by `scripts/test.sh` when it may). No mock: the page
//! is rendered and its script runs in the browser; the test reads the DOM through `execute/sync`.
//! Without them a test skips by name (or fails under `SLUICE_REQUIRE_TOOLS=1`), see
//! `support::require_tool`.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{require_tools, Client};

/// A chromedriver process with one headless Chromium session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless session; `None` (the calling test is
    /// skipped, by name) when `chromium` or `chromedriver` is not installed.
    pub fn start() -> Option<Browser> {
        let tools = require_tools(&[
            ("chromium", "chromium"),
            ("chromedriver", "chromium-driver"),
        ])?;
        let (chromium, chromedriver) = (&tools[0], &tools[1]);
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
        };
        let up = Instant::now();
        while b.call("GET", "/status", None).is_err() {
            assert!(
                up.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // --no-sandbox: the test may run as root in a container, where Chromium's
                // sandbox cannot start; the page is our own.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run", "--window-size=1400,900"]
            }
        }}});
        let v = b
            .call("POST", "/session", Some(caps))
            .unwrap_or_else(|e| panic!("new session: {e}"));
        b.session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        Some(b)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut c = Client::connect(self.addr).map_err(|e| e.to_string())?;
        c.set_read_timeout(Duration::from_secs(60));
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let headers = [("Content-Type", "application/json"), ("Host", "127.0.0.1")];
        let r = c
            .try_request(method, path, &headers, body.as_bytes())
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("{e}: {}", r.text()))?;
        if r.status != 200 {
            return Err(format!("{method} {path}: {} {v}", r.status));
        }
        Ok(v)
    }

    /// Navigates to `url` (waits for the load event).
    pub fn goto(&self, url: &str) {
        let path = format!("/session/{}/url", self.session);
        self.call("POST", &path, Some(json!({ "url": url })))
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Makes the page's viewport exactly `width` × `height` CSS pixels at scale 1 (DevTools'
    /// device metrics, through chromedriver's CDP endpoint): layout checks and screenshots do
    /// not depend on the window's decorations.
    pub fn viewport(&self, width: u32, height: u32) {
        let path = format!("/session/{}/goog/cdp/execute", self.session);
        let params =
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        let cmd = json!({"cmd": "Emulation.setDeviceMetricsOverride", "params": params});
        self.call("POST", &path, Some(cmd))
            .unwrap_or_else(|e| panic!("viewport {width}x{height}: {e}"));
    }

    /// A PNG of the viewport as Chromium rendered it.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let path = format!("/session/{}/screenshot", self.session);
        let v = self
            .call("GET", &path, None)
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        let b64 = v["value"].as_str().expect("screenshot is a base64 string");
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("screenshot base64")
    }

    /// Runs `script` (a function body) in the page; its return value.
    pub fn eval(&self, script: &str) -> Value {
        let path = format!("/session/{}/execute/sync", self.session);
        self.call("POST", &path, Some(json!({ "script": script, "args": [] })))
            .unwrap_or_else(|e| panic!("execute: {e}"))["value"]
            .take()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
