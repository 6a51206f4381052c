//! Loopback networking for tests: free ports, a proxy that can be cut.

use std::time::Duration;

/// A free loopback TCP port (bound then released), below Linux's ephemeral range (32768+):
/// a port from that range may be taken by any outgoing connection before the node binds it.
/// Test binaries run in parallel start at different places (by process id).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 10_000 + (std::process::id() % 200) * 100;
    for _ in 0..20_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (base - 10_000 + n) % 22_000;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok()
            && std::net::TcpListener::bind(("0.0.0.0", port as u16)).is_ok()
        {
            return port as u16;
        }
    }
    panic!("no free port below 32000")
}

/// A loopback TCP proxy a test can cut: connections to `listen` are forwarded to `target`
/// until [`CutProxy::cut`], which closes every connection and refuses new ones until
/// [`CutProxy::heal`]. It stands for a blocked port (a firewall rule) without root.
pub struct CutProxy {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CutProxy {
    /// Listens on 127.0.0.1:`port` and forwards to 127.0.0.1:`target`.
    pub fn start(port: u16, target: u16) -> CutProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (cut.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                if c.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    let (c, s) = (c.clone(), s.clone());
                    let _ = from.set_nonblocking(false);
                    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 * 1024];
                        while !c.load(Ordering::Relaxed) && !s.load(Ordering::Relaxed) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    // Cut: what was read after the cut is lost, as behind
                                    // a firewall rule.
                                    if c.load(Ordering::Relaxed) || to.write_all(&buf[..n]).is_err()
                                    {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(std::net::Shutdown::Both);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        CutProxy { port, cut, stop }
    }

    /// Closes every forwarded connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forwards again.
    pub fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
