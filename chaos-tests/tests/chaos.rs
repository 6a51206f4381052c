//! Chaos tests (issues #6 and #13): a 3-node cluster in containers under load, faults of one
//! kind per test (the randomized nemesis mixes them); after healing, nothing acknowledged may be
//! missing, duplicated or different on any node, and nothing a consumer read may be absent from
//! the final log or stored at another offset (a dirty read). Each test prints a row: scenario,
//! faults injected, messages acknowledged, lost (must be 0), read by the consumer, dirty reads
//! (must be 0), Dolly Puts acknowledged and lost (must be 0), topics created, and the longest
//! time until the cluster was healthy again after one fault.
//!
//! The nodes' data directories are host directories bind-mounted into the containers
//! (`zper_chaos_tests::disk`): plain ones, LazyFs mounts that drop every unsynced write on a
//! power loss, or small tmpfs disks that fill up. The scenarios run one at a time. They need a
//! Docker daemon, root and /dev/fuse, and fail with a clear message without them; the image is
//! built from the binary under test.

use std::time::{Duration, Instant};

use zper_chaos_tests::cluster::wait_until;
use zper_chaos_tests::disk::{flip_byte, DiskKind};
use zper_chaos_tests::scenario::{
    fault, scenario, scenario_secured, scenario_with, settle, SERIAL,
};
use zper_chaos_tests::workload::TOPIC;
use zper_chaos_tests::{check, require_docker, Cluster};

/// kill -9 of the fragment leader, then its restart (`what` names the fault).
fn kill_the_fragment_leader(
    c: &mut Cluster,
    what: &str,
) -> Option<zper_chaos_tests::scenario::Fault> {
    let l = c.fragment_leader(TOPIC).expect("a fragment leader");
    c.kill(l);
    settle();
    c.start_again(l);
    fault(1, what)
}

#[test]
fn kill9_of_the_fragment_leader() {
    scenario("kill9-fragment-leader", 5, |c, _, _| {
        kill_the_fragment_leader(c, "kill -9 the fragment leader, restart")
    });
}

#[test]
fn kill9_of_the_fragment_leader_with_security_on() {
    // Issue #19: CURVE on every endpoint (replication between the nodes included) and the
    // admin token on Raft; the same guarantees hold through a leader's crash.
    scenario_secured("secured-kill9-fragment-leader", 3, |c, _, _| {
        kill_the_fragment_leader(
            c,
            "kill -9 the fragment leader, restart (CURVE and token on)",
        )
    });
}

#[test]
fn kill9_of_the_raft_leader() {
    scenario("kill9-raft-leader", 3, |c, _, _| {
        let l = c.raft_leader().expect("a Raft leader");
        c.kill(l);
        settle();
        c.start_again(l);
        fault(1, "kill -9 the Raft leader, restart")
    });
}

#[test]
fn partition_of_the_leader_then_heal() {
    scenario("partition-leader", 3, |c, _, _| {
        let l = c.fragment_leader(TOPIC).expect("a fragment leader");
        c.disconnect(l);
        std::thread::sleep(Duration::from_secs(5));
        c.reconnect(l);
        fault(1, "disconnect the fragment leader 5 s")
    });
}

#[test]
fn pause_past_the_lease_then_resume() {
    scenario("pause-past-lease", 3, |c, _, _| {
        let l = c.fragment_leader(TOPIC).expect("a fragment leader");
        c.pause(l);
        std::thread::sleep(Duration::from_secs(4));
        c.unpause(l);
        fault(1, "docker pause the fragment leader 4 s (lease 1.5 s)")
    });
}

#[test]
fn restart_of_all_three_at_once() {
    scenario("restart-all", 3, |c, _, _| {
        for i in 0..3 {
            c.kill(i);
        }
        for i in 0..3 {
            c.start_again(i);
        }
        fault(3, "kill -9 all three, start all")
    });
}

#[test]
fn rolling_restart() {
    scenario("rolling-restart", 1, |c, w, _| {
        for i in 0..3 {
            c.restart(i);
            w.set_ip(i, &c.nodes[i].ip);
            assert!(
                c.wait_healthy(Duration::from_secs(60)),
                "healthy after restarting node {}",
                i + 1
            );
        }
        fault(3, "restart 1, 2, 3 (SIGTERM), one at a time")
    });
}

/// Issue #13: power loss of one node (the fragment leader, then a follower, in turn) under
/// mode-1 and mode-2 load: its disk keeps only what was fsynced, including file creations and
/// renames whose directory was fsynced.
#[test]
fn power_loss_of_one_node() {
    scenario_with(
        "power-loss-one",
        [DiskKind::Lazy; 3],
        6,
        |c, _, round| {
            let l = c.fragment_leader(TOPIC).expect("a fragment leader");
            let victim = if round % 2 == 0 { l } else { (l + 1) % 3 };
            let dropped = c.power_loss(&[victim]);
            eprintln!("power-loss-one: node {} dropped {dropped:?}", victim + 1);
            fault(1, "power loss of one node (leader, follower in turn)")
        },
        |_| {},
    );
}

/// Issue #13: power loss of all three nodes at once.
#[test]
fn power_loss_of_all_three() {
    scenario_with(
        "power-loss-all",
        [DiskKind::Lazy; 3],
        3,
        |c, _, _| {
            let dropped = c.power_loss(&[0, 1, 2]);
            eprintln!("power-loss-all: dropped {dropped:?}");
            fault(3, "power loss of all three at once")
        },
        |_| {},
    );
}

/// The value of `zper_integrity_events_total{event}` on node `i` (0 when absent).
fn integrity_events(c: &Cluster, i: usize, event: &str) -> u64 {
    let url = format!("http://{}/metrics", c.nodes[i].http());
    reqwest::blocking::get(url)
        .and_then(|r| r.text())
        .ok()
        .and_then(|text| {
            let prefix = format!("zper_integrity_events_total{{event=\"{event}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Issue #13: a flipped byte in the leader's active segment, then in a sealed segment of one
/// follower. The damage is detected (metrics), the damaged copy is repaired from the others,
/// and nothing acknowledged is lost.
#[test]
fn a_flipped_byte_on_the_leader_and_on_a_follower() {
    let detected = std::cell::RefCell::new(Vec::new());
    scenario_with(
        "corruption",
        [DiskKind::Dir; 3],
        2,
        |c, _, round| {
            let l = c.fragment_leader(TOPIC).expect("a fragment leader");
            let (victim, sealed) = if round == 0 {
                (l, false)
            } else {
                ((l + 1) % 3, true)
            };
            // Sealed segments exist once 64 KiB was written (segment_size in the cluster).
            if sealed {
                assert!(
                    wait_until(Duration::from_secs(120), || c.disks[victim]
                        .segments(TOPIC)
                        .len()
                        >= 2),
                    "a sealed segment on node {}",
                    victim + 1
                );
            }
            c.kill(victim);
            let segments = c.disks[victim].segments(TOPIC);
            let file = if sealed {
                segments[segments.len() - 2].clone()
            } else {
                segments.last().expect("an active segment").clone()
            };
            let len = std::fs::metadata(&file).map_or(0, |m| m.len());
            flip_byte(&file, len / 2);
            c.start_again(victim);
            detected.borrow_mut().push(victim);
            fault(
                1,
                "flip one byte: leader's active segment, a follower's sealed one",
            )
        },
        |c| {
            // The check reads every copy in full, which finds the sealed segment's damage if
            // recovery did not; the counters are looked at once the copies are identical.
            let _ = check_reads_all(c);
            for &i in detected.borrow().iter() {
                assert!(
                    wait_until(Duration::from_secs(60), || integrity_events(
                        c,
                        i,
                        "corruption_detected"
                    ) > 0),
                    "node {} counted the damage in zper_integrity_events_total",
                    i + 1
                );
            }
        },
    );
}

/// Reads every node's copy once (a reader's FETCHes over the whole log), so damage in sealed
/// segments is met.
fn check_reads_all(c: &Cluster) -> usize {
    let acked = zper_chaos_tests::Acked::default();
    check(c, &acked).consumed
}

/// Issue #13: the disk of a follower, then of the leader, fills up (a 64 MiB tmpfs); writes
/// are refused with a status meanwhile or the node stops non-zero; when space returns the node
/// is back (started again by the test, as a supervisor would) and nothing acknowledged is lost.
#[test]
fn a_full_disk_on_a_follower_then_on_the_leader() {
    scenario_with(
        "disk-full",
        [DiskKind::Small(64); 3],
        2,
        |c, _, round| {
            let l = c.fragment_leader(TOPIC).expect("a fragment leader");
            let victim = if round == 0 { (l + 1) % 3 } else { l };
            let filler = c.disks[victim].fill(0);
            // The node notices: it refuses writes with a status (counted) or, when its Raft
            // store cannot write, stops with a non-zero status for its supervisor.
            let noticed = wait_until(Duration::from_secs(20), || {
                !c.running(victim) || integrity_events(c, victim, "disk_refused") > 0
            });
            std::thread::sleep(Duration::from_secs(3));
            let _ = std::fs::remove_file(&filler);
            assert!(noticed, "node {} noticed its full disk", victim + 1);
            if !c.running(victim) {
                c.start_again(victim);
            }
            fault(1, "fill the disk of a follower, then of the leader, 6 s")
        },
        |_| {},
    );
}

/// A tiny seeded generator (SplitMix64), so a schedule can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Issue #13: a seeded random schedule of kill -9, pause past the lease, partitions, power loss
/// of one or all nodes and graceful restarts, one fault at a time under the mixed load, for
/// `ZPER_CHAOS_NEMESIS_S` seconds (default 300). The seed is printed; `ZPER_CHAOS_SEED=<n>`
/// replays a schedule.
#[test]
fn randomized_nemesis() {
    let seed = std::env::var("ZPER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    // The faults end well before the workload's own bound (CI once failed a 300 s run at its
    // last fault because the workload, then bounded at 300 s from its own start, had stopped).
    let most = zper_chaos_tests::workload::LIMIT.as_secs() - 300;
    let seconds: u64 = std::env::var("ZPER_CHAOS_NEMESIS_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
        .min(most);
    eprintln!("randomized-nemesis: seed {seed} (replay with ZPER_CHAOS_SEED={seed})");
    let mut rng = Rng(seed);
    let until = Instant::now() + Duration::from_secs(seconds);
    // Rounds are bounded by time; the count is an upper bound only.
    let rounds = usize::try_from(seconds).unwrap_or(600);
    scenario_with(
        "randomized-nemesis",
        [DiskKind::Lazy; 3],
        rounds,
        |c, _, _| {
            if Instant::now() >= until {
                return None;
            }
            let node = rng.below(3) as usize;
            let f = match rng.below(6) {
                0 => {
                    c.kill(node);
                    std::thread::sleep(Duration::from_millis(200 + rng.below(2000)));
                    c.start_again(node);
                    fault(1, "kill -9")
                }
                1 => {
                    c.pause(node);
                    std::thread::sleep(Duration::from_millis(2000 + rng.below(2000)));
                    c.unpause(node);
                    fault(1, "pause past the lease")
                }
                2 => {
                    c.disconnect(node);
                    std::thread::sleep(Duration::from_millis(1000 + rng.below(4000)));
                    c.reconnect(node);
                    fault(1, "partition")
                }
                3 => {
                    c.power_loss(&[node]);
                    fault(1, "power loss of one")
                }
                4 => {
                    c.power_loss(&[0, 1, 2]);
                    fault(3, "power loss of all")
                }
                _ => {
                    c.restart(node);
                    fault(1, "restart")
                }
            };
            std::thread::sleep(Duration::from_millis(rng.below(1500)));
            f
        },
        |_| eprintln!("randomized-nemesis: replay with ZPER_CHAOS_SEED={seed}"),
    );
}

/// The README's path: `docker-compose up` of docker-compose.yml (with the image under test)
/// gives three healthy nodes and `zper cluster status` lists three live ones; `down -v` removes
/// everything.
#[test]
fn docker_compose_up_gives_three_healthy_nodes() {
    compose_up_and_use(&[], &[]);
}

/// Issue #19: docs/operations.md's worked example, `docker-compose.yml` with
/// `deploy/compose.secured.yml` and keys from `zper keygen`: the host's clients use every
/// feature with the keys and the token, and without the keys a producer gets nothing stored.
#[test]
fn docker_compose_with_security_on_serves_clients_that_have_the_keys() {
    let keys = tempfile::tempdir().expect("tempdir");
    let k = keys.path().display().to_string();
    for name in [format!("{k}/cluster"), format!("{k}/clients/app")] {
        let out = std::process::Command::new(zper_testkit::zper_binary())
            .args(["keygen", &name])
            .output()
            .expect("zper keygen");
        assert!(out.status.success(), "{out:?}");
    }
    // The documented step: the image's user (10001) reads the cluster's secret key.
    std::os::unix::fs::chown(keys.path().join("cluster.key_secret"), Some(10001), None)
        .expect("chown (the chaos suite runs as root)");
    std::fs::write(keys.path().join("token"), "compose-s3cret\n").expect("token");
    let env = [
        ("ZPER_KEYS", k.clone()),
        ("ZPER_ADMIN_TOKEN", "compose-s3cret".to_owned()),
        ("ZPER_CURVE_SERVER_KEY", format!("{k}/cluster.key")),
        (
            "ZPER_CURVE_SECRET_KEY_FILE",
            format!("{k}/clients/app.key_secret"),
        ),
    ];
    compose_up_and_use(&["deploy/compose.secured.yml"], &env);
}

/// `docker-compose up` of docker-compose.yml and the `overrides` (with `env`), three healthy
/// nodes, then [`host_clients_use_every_feature`] with `env`; `down -v` at the end.
fn compose_up_and_use(overrides: &[&str], env: &[(&str, String)]) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_docker();
    zper_chaos_tests::cluster::ensure_image();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned();
    let project = format!("zpercompose{}{}", std::process::id(), overrides.len());
    let compose = |args: &[&str]| {
        let mut files = vec!["-f", "docker-compose.yml"];
        for o in overrides {
            files.extend(["-f", o]);
        }
        std::process::Command::new("docker-compose")
            .current_dir(&root)
            .env("ZPER_IMAGE", "zper:chaos")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(files)
            .args(["-p", &project])
            .args(args)
            .output()
            .expect("docker-compose (Debian package docker-compose, or compose v1)")
    };
    struct Down<'a>(&'a dyn Fn(&[&str]) -> std::process::Output);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&["down", "-v", "-t", "1"]);
        }
    }
    let _down = Down(&compose);
    let up = compose(&["up", "-d"]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let mut status = String::new();
    let healthy = wait_until(Duration::from_secs(90), || {
        let ps = compose(&["ps"]);
        let text = String::from_utf8_lossy(&ps.stdout).into_owned();
        let out = compose(&["exec", "-T", "zper1", "zper", "cluster", "status"]);
        status = String::from_utf8_lossy(&out.stdout).into_owned();
        text.matches("(healthy)").count() == 3
            && status.lines().filter(|l| l.contains(" true ")).count() == 3
    });
    assert!(healthy, "three healthy nodes: {status}");
    assert!(status.contains("voters 1,2,3"), "{status}");
    host_clients_use_every_feature(env);
}

/// Issue #15: from the host, against the compose cluster's published ports only: create a
/// topic of three fragments, produce, consume every fragment, subscribe (the relays named by
/// the controller are the nodes' published ones), a consistent read through a follower's
/// published HTTP port, Dolly on node 2's published port.
fn host_clients_use_every_feature(env: &[(&str, String)]) {
    let zper = |args: &[&str]| {
        let out = std::process::Command::new(zper_testkit::zper_binary())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .output()
            .expect("run zper");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), text, err)
    };
    let admin = "127.0.0.1:9644";
    let created = wait_until(Duration::from_secs(30), || {
        zper(&[
            "topics",
            "create",
            "hostc",
            "--fragments",
            "3",
            "--admin",
            admin,
        ])
        .0
    });
    assert!(created, "topic created from the host");
    let messages: Vec<String> = (0..30).map(|i| format!("m{i}")).collect();
    let produce = [
        "produce",
        "-t",
        "hostc",
        "-w",
        "tcp://127.0.0.1:5555",
        "-m",
        "2",
    ];
    let mut args = produce.to_vec();
    args.extend(messages.iter().map(String::as_str));
    let (ok, _, err) = zper(&args);
    assert!(ok, "produce from the host: {err}");
    let secured = env.iter().any(|(k, _)| *k == "ZPER_CURVE_SERVER_KEY");
    if secured {
        // Without the keys (plain ZMTP to a CURVE writer) nothing is acknowledged.
        let out = std::process::Command::new(zper_testkit::zper_binary())
            .args(produce)
            .args(["--timeout", "2s", "stranger"])
            .output()
            .expect("run zper");
        assert!(!out.status.success(), "a producer without keys: {out:?}");
    }
    // A replica's readers see the high-water mark as of its last fetch: wait for the last one.
    let mut last = String::new();
    let all = wait_until(Duration::from_secs(30), || {
        let (ok, out, err) = zper(&[
            "consume",
            "-t",
            "hostc",
            "-r",
            "tcp://127.0.0.1:5556",
            "--admin",
            admin,
            "--json",
        ]);
        last = format!("{out}{err}");
        ok && out.lines().count() == 30
    });
    assert!(all, "every fragment read from the host: {last}");
    let (ok, out, err) = zper(&[
        "subscribe",
        "-t",
        "hostc",
        "-g",
        "host",
        "-C",
        "tcp://127.0.0.1:5558",
        "-n",
        "30",
        "--idle",
        "30s",
    ]);
    assert!(ok, "subscribe from the host: {err}");
    assert_eq!(
        out.lines().count(),
        30,
        "30 records pushed to the host: {out}\n{err}"
    );
    let token = env.iter().find(|(k, _)| *k == "ZPER_ADMIN_TOKEN");
    let mut put = reqwest::blocking::Client::new()
        .put(format!("http://{admin}/v1/kv/hostkey"))
        .body("v1")
        .timeout(Duration::from_secs(10));
    if let Some((_, t)) = token {
        put = put.bearer_auth(t);
    }
    let r = put.send().expect("kv put");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text());
    for http in ["127.0.0.1:19644", "127.0.0.1:29644"] {
        let (s, body) = zper_testkit::http("GET", http, "/v1/kv/hostkey?consistent=true", None)
            .expect("answer");
        assert_eq!(s, 200, "consistent read via {http}: {body}");
    }
    let (ok, out, err) = zper(&["dolly", "-e", "tcp://127.0.0.1:13266", "get", "hostkey"]);
    assert!(
        ok && out.contains("v1"),
        "Dolly on node 2 from the host: {out} {err}"
    );
}
