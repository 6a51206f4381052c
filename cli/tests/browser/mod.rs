//! A headless Chromium driven over the Chrome DevTools Protocol (a WebSocket of JSON messages),
//! for the web console test (issue #20): it records every exception, console error, browser
//! log error and request of the page, evaluates expressions in it and takes screenshots.
//! Debian's `chromium` (installed by `scripts/system-packages.sh --tests`); `ZPER_CHROMIUM`
//! names another binary.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

/// One headless Chromium with one page, killed on drop.
pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Every event the page sent (`{"method": ..., "params": ...}`), oldest first.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

fn chromium() -> String {
    std::env::var("ZPER_CHROMIUM").unwrap_or_else(|_| "chromium".to_owned())
}

impl Browser {
    /// [`Browser::launch`], or `None` with a note when Chromium is not installed, outside CI
    /// (`CI=true` makes a missing browser a failure, as for the other interop tests).
    pub fn launch_or_skip() -> Option<Browser> {
        let found = Command::new(chromium())
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found && std::env::var("CI").as_deref() != Ok("true") {
            eprintln!(
                "note: {} not found, the web console test is skipped \
                 (scripts/system-packages.sh --tests installs Debian's chromium)",
                chromium()
            );
            return None;
        }
        Some(Browser::launch())
    }

    /// Starts Chromium (1280x900, no sandbox: tests run as root in containers) with its
    /// Runtime, Log, Network and Page domains on.
    ///
    /// Panics with a hint when Chromium is missing or does not start.
    pub fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new(chromium())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): install Debian's chromium \
                     (scripts/system-packages.sh --tests) or set ZPER_CHROMIUM",
                    chromium()
                )
            });
        // Chromium prints its DevTools address on stderr; the thread keeps draining stderr so
        // the browser never blocks on a full pipe.
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_owned());
                }
            }
        });
        let browser_ws = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("Chromium printed its DevTools address within 60 s");
        let host = browser_ws
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .expect("host:port")
            .to_owned();
        let list: Value = serde_json::from_str(
            &reqwest::blocking::get(format!("http://{host}/json/list"))
                .and_then(|r| r.text())
                .expect("DevTools target list"),
        )
        .expect("json");
        let page = list
            .as_array()
            .and_then(|l| l.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_owned();
        let stream = TcpStream::connect(&host).expect("connect to DevTools");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let (ws, _) = tungstenite::client(page.as_str(), stream).expect("DevTools WebSocket");
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        for domain in ["Runtime", "Log", "Network", "Page"] {
            b.call(&format!("{domain}.enable"), json!({}));
        }
        b
    }

    /// Sends one command and returns its `result`, recording the events that come before it.
    ///
    /// Panics on a protocol error or after 30 s without an answer.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).expect("send to DevTools");
        loop {
            let text = match self.ws.read().expect("DevTools answers") {
                Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
    }

    /// Opens `url` in the page.
    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// The value of JavaScript `expression` in the page (awaited when it is a promise).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Evaluates `expression` every 200 ms until it is `true`, for at most `limit` (an
    /// exception, as while the page is still loading, counts as false).
    pub fn wait_for(&mut self, expression: &str, limit: Duration) -> bool {
        let guarded = format!(
            "(() => {{ try {{ return ({expression}); }} catch (_) {{ return false; }} }})()"
        );
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.eval(&guarded) == json!(true) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// Saves a PNG of the page to `path`.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("data"))
            .expect("base64");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Exceptions, `console.error` calls and browser log entries at level error, as text.
    pub fn errors(&mut self) -> Vec<String> {
        self.eval("1"); // takes the events sent so far
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => Some(p["exceptionDetails"].to_string()),
                    "Runtime.consoleAPICalled" if p["type"] == "error" => {
                        Some(p["args"].to_string())
                    }
                    "Log.entryAdded" if p["entry"]["level"] == "error" => {
                        Some(p["entry"].to_string())
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// The URL of every request the page made.
    pub fn requests(&mut self) -> Vec<String> {
        self.eval("1");
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
