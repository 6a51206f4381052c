//! The built-in web console (issue #20), in a real headless Chromium against a three-node
//! cluster: the nodes, topics and leaders it shows are the cluster's, a stopped replica shows as
//! down and its fragments as under-replicated, a subscription group's lag is shown, the charts
//! draw the node's metrics, the page logs no error and makes no request outside the node.
//! Screenshots of each view go to `$CARGO_TARGET_TMPDIR/console/` (the test prints where).

mod browser;
mod common;

use std::path::PathBuf;
use std::time::Duration;

use browser::Browser;
use common::run::subscribe_and_ack;
use common::*;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).expect("artifact dir");
    dir
}

/// Opens view `view` of the console and waits until it has drawn (`ready` is true).
fn open(b: &mut Browser, base: &str, view: &str, ready: &str) {
    b.navigate(&format!("{base}/ui/#{view}"));
    assert!(
        b.wait_for(
            &format!("document.querySelector('main').dataset.view === '{view}' && ({ready})"),
            WAIT
        ),
        "the {view} view: {ready}\n{}",
        b.eval("document.body.innerText")
    );
}

#[test]
fn the_console_shows_the_cluster_as_it_is_and_requests_nothing_elsewhere() {
    let Some(mut b) = Browser::launch_or_skip() else {
        return;
    };
    let mut c = TestCluster::start();
    let orders = c.create("orders", 3);
    let audit = c.create("audit", 3);
    assert_eq!(c.produce_all(orders, "orders", 0..20).len(), 20);
    assert_eq!(c.produce_all(audit, "audit", 0..5).len(), 5);
    // A group that reads and acknowledges 3 of the 20 messages: 17 behind.
    let controller = get_json(&c.http(orders), "/v1/brokers")
        .as_array()
        .and_then(|b| b.iter().find(|b| b["id"] == orders).cloned())
        .and_then(|b| b["endpoints"]["controller"].as_str().map(str::to_owned))
        .expect("controller endpoint");
    subscribe_and_ack(&controller, "orders", "billing", 3);

    // The page is served by a node that does not lead Raft: it says so.
    let raft_leader = zper_testkit::raft_leader(&c.http(1)).expect("a Raft leader");
    let ui = (1..=3u64).find(|n| *n != raft_leader).expect("a follower");
    let base = format!("http://{}", c.http(ui));
    let shots = artifacts();

    open(
        &mut b,
        &base,
        "cluster",
        "document.querySelectorAll('#nodes tbody tr').length === 3",
    );
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#nodes tbody tr')].map(r => Number(r.dataset.node))"
        ),
        json!([1, 2, 3])
    );
    assert!(b.wait_for(
        "document.querySelectorAll('#nodes tr.down').length === 0",
        WAIT
    ));
    b.screenshot(&shots.join("cluster.png"));

    open(
        &mut b,
        &base,
        "topics",
        "document.querySelectorAll('section.topic').length === 2",
    );
    for (topic, leader) in [("orders", orders), ("audit", audit)] {
        let shown = b.eval(&format!(
            "document.querySelector('section.topic[data-topic=\"{topic}\"] tr[data-fragment=\"0\"] td:nth-child(2)').textContent"
        ));
        assert_eq!(shown, json!(leader.to_string()), "{topic}'s leader");
    }
    assert_eq!(
        b.eval("document.querySelectorAll('tr[data-under-replicated=\"true\"]').length"),
        json!(0)
    );
    b.screenshot(&shots.join("topics.png"));

    // The group's lag: it acknowledged some of the first 3 messages (17 bytes each stored:
    // `[id]["message <id>"]`), so 17 to 19 of the 20 are behind, and the bytes behind are the
    // readable end minus the committed offset.
    open(
        &mut b,
        &base,
        "groups",
        "document.querySelector('.group[data-group=\"billing\"] tr[data-fragment=\"0\"] .lag-messages').textContent !== '—'",
    );
    let row = b.eval(
        "[...document.querySelectorAll('.group[data-group=\"billing\"] tr[data-fragment=\"0\"] td')].map(td => td.textContent)",
    );
    let cells: Vec<String> = serde_json::from_value(row).expect("cells");
    let committed: u64 = cells[2].parse().expect("committed offset");
    let end: u64 = cells[3].parse().expect("readable end");
    let behind: u64 = cells[5].parse().expect("lag in messages");
    assert!(
        cells[1].starts_with("zper-"),
        "the member that read: {cells:?}"
    );
    assert!([17, 34, 51].contains(&committed), "{cells:?}");
    assert_eq!(cells[4], format!("{} B", end - committed), "{cells:?}");
    assert!((17..20).contains(&behind), "{cells:?}");
    b.screenshot(&shots.join("groups.png"));

    // Charts: messages in while the page is open, drawn from at least two samples.
    open(&mut b, &base, "charts", "true");
    assert_eq!(c.produce_all(orders, "orders", 100..130).len(), 30);
    assert!(
        b.wait_for(
            "(() => { const c = document.querySelector('[data-chart=\"messages-in\"]'); \
             return c !== null && Number(c.dataset.points) >= 2 && c.querySelector('path') !== null; })()",
            WAIT
        ),
        "the messages-in chart has data"
    );
    assert!(b.wait_for(
        "document.querySelector('[data-chart=\"flush-latency\"] path') !== null",
        WAIT
    ));
    b.screenshot(&shots.join("charts.png"));

    // Stop a replica of orders that is not its leader nor the node serving the page (and, when
    // there is such a node, leads no topic either).
    let others: Vec<u64> = (1..=3u64).filter(|n| *n != ui && *n != orders).collect();
    let victim = others
        .iter()
        .copied()
        .find(|n| *n != audit)
        .unwrap_or(others[0]);
    c.node(victim).kill9();
    assert!(eventually(|| c.fragment(ui, "orders")["isr"]
        .as_array()
        .is_some_and(|isr| !isr.contains(&json!(victim)))));
    open(
        &mut b,
        &base,
        "topics",
        "document.querySelectorAll('section.topic').length === 2",
    );
    assert!(
        b.wait_for(
            "document.querySelector('section.topic[data-topic=\"orders\"] tr[data-under-replicated=\"true\"]') !== null",
            WAIT
        ),
        "orders shown under-replicated after node {victim} stopped"
    );
    b.screenshot(&shots.join("topics-under-replicated.png"));
    open(
        &mut b,
        &base,
        "cluster",
        &format!("document.querySelector('#nodes tr.down[data-node=\"{victim}\"]') !== null"),
    );
    b.screenshot(&shots.join("cluster-node-down.png"));

    let errors = b.errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let requests = b.requests();
    assert!(requests.len() > 10, "{requests:?}");
    let outside: Vec<&String> = requests
        .iter()
        .filter(|u| !u.starts_with(&format!("{base}/")))
        .collect();
    assert!(
        outside.is_empty(),
        "requests that left the node: {outside:?}"
    );
    println!("screenshots in {}", shots.display());
}

#[test]
fn admin_actions_need_the_token_and_go_through_the_admin_api() {
    let Some(mut b) = Browser::launch_or_skip() else {
        return;
    };
    let n = TestNode::start_with(|c| c.cluster.admin_token = Some("s3cret".to_owned()));
    let http = n.node().endpoints().http.clone();
    let base = format!("http://{http}");
    let topics = || get_json(&http, "/v1/topics");
    open(
        &mut b,
        &base,
        "topics",
        "document.getElementById('create-topic') !== null",
    );
    // Read-only by default: no form to change anything is shown.
    assert_eq!(
        b.eval("getComputedStyle(document.getElementById('create-topic')).display"),
        json!("none")
    );
    let create = |b: &mut Browser, token: &str, topic: &str| {
        b.eval(&format!(
            "(() => {{ document.getElementById('admin-toggle').click(); \
             document.getElementById('admin-token').value = '{token}'; \
             document.getElementById('admin-form').requestSubmit(); \
             const f = document.getElementById('create-topic'); \
             f.topic.value = '{topic}'; f.requestSubmit(); return 1; }})()"
        ));
    };
    create(&mut b, "wrong", "refused");
    assert!(
        b.wait_for(
            "document.getElementById('message').className === 'error' && \
             document.getElementById('message').textContent.includes('admin token')",
            WAIT
        ),
        "a wrong token is reported: {}",
        b.eval("document.getElementById('message').textContent")
    );
    assert_eq!(topics(), json!([]));
    b.eval("document.getElementById('admin-toggle').click(); 1"); // admin actions off
    create(&mut b, "s3cret", "made");
    assert!(
        eventually(|| topics()[0]["name"] == json!("made")),
        "{}",
        topics()
    );
    open(
        &mut b,
        &base,
        "topics",
        "document.querySelector('section.topic[data-topic=\"made\"]') !== null",
    );
    b.eval(
        "(() => { const f = document.querySelector('section.topic[data-topic=\"made\"] form'); \
         f.hours.value = '5'; f.requestSubmit(); return 1; })()",
    );
    assert!(
        eventually(|| topics()[0]["retain_hours"] == json!(5)),
        "{}",
        topics()
    );
    b.screenshot(&artifacts().join("admin-actions.png"));
}
