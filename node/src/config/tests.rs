//! Parsing, defaults and errors of the node configuration.

use super::*;

fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
    NodeConfig::from_properties_str(text, Path::new("test.properties"))
}

#[test]
fn embedded_default_runs_under_data_on_default_ports() {
    let c = NodeConfig::embedded().expect("embedded default parses");
    assert_eq!(c.store.base_dir, PathBuf::from("./data"));
    assert_eq!(c.writer_bind, "tcp://*:5555");
    assert_eq!(c.reader_bind, "tcp://*:5556");
    assert_eq!(c.ack_bind, "tcp://*:5557");
    assert_eq!(c.store.flush.flush_messages, 1000);
    assert!(c.unknown_keys.is_empty());
}

#[test]
fn code_defaults_spec_7() {
    let c = parse("").expect("empty file");
    assert_eq!(c.store.segment_size, 536_870_912);
    assert_eq!(c.store.flush.flush_messages, 10_000);
    assert_eq!(c.store.flush.flush_interval, Duration::from_millis(10_000));
    assert_eq!(c.store.retain, Duration::from_secs(168 * 3600));
    assert_eq!(c.writer_workers, 5);
    assert_eq!(c.reader_workers, 5);
    assert_eq!(c.max_message, 8_388_608);
}

#[test]
fn values_are_trimmed_and_booleans_strict() {
    let c = parse("allow_empty_message = FALSE  \nflush_messages = 7 \n").expect("parses");
    assert!(!c.store.allow_empty_message);
    assert_eq!(c.store.flush.flush_messages, 7);
    let e = parse("decoder = yes").expect_err("not a boolean");
    assert!(e.to_string().contains("`decoder`"), "{e}");
}

#[test]
fn bad_values_name_the_key() {
    for (text, key) in [
        ("segment_size = lots", "segment_size"),
        ("writer.workers = 0", "writer.workers"),
        ("flush_interval = -5", "flush_interval"),
        ("reader.bind = 5556", "reader.bind"),
        ("writer.bind = tcp://127.0.0.1:99999", "writer.bind"),
        ("ack.bind = tcp://127.0.0.1", "ack.bind"),
        ("io_threads = ", "io_threads"),
        ("io_threads = 100000", "io_threads"),
        ("reader.workers = 5000", "reader.workers"),
        ("controller.quorum.x = a:1", "controller.quorum.x"),
        ("controller.quorum.1 = nohost", "controller.quorum.1"),
        (
            "controller.quorum.1 = http://127.0.0.1:9644",
            "controller.quorum.1",
        ),
        ("node.id = 0", "node.id"),
        ("http.bind = 9644", "http.bind"),
        ("raft.heartbeat_ms = 1000", "raft.election_timeout_ms"),
        ("acks = some", "acks"),
        ("min_insync = 0", "min_insync"),
        ("replica.lag_ms = soon", "replica.lag_ms"),
        ("replica.bind = 5560", "replica.bind"),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
    }
}

#[test]
fn replication_keys_have_defaults_and_are_read() {
    let c = parse("").expect("empty");
    assert_eq!(c.replica_bind, "tcp://*:5560");
    assert_eq!(c.replica_lag, Duration::from_millis(5000));
    assert_eq!((c.min_insync, c.acks_leader), (None, false));
    let c = parse("replica.bind = tcp://127.0.0.1:7000\nreplica.lag_ms = 250\nmin_insync = 3\nacks = leader\n")
        .expect("parses");
    assert_eq!(c.replica_bind, "tcp://127.0.0.1:7000");
    assert_eq!(c.replica_lag, Duration::from_millis(250));
    assert_eq!((c.min_insync, c.acks_leader), (Some(3), true));
    assert!(c.unknown_keys.is_empty());
}

#[test]
fn flags_override_the_file_and_replace_its_voters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("n.properties");
    std::fs::write(
        &path,
        "node.id = 1\ncontroller.quorum.1 = a:1\ncontroller.quorum.2 = b:2\nflush_messages = 9\n",
    )
    .expect("write");
    let c = NodeConfig::load(
        Some(&path),
        &[
            ("node.id".into(), "3".into()),
            ("controller.quorum.3".into(), "c:3".into()),
            ("controller.quorum.4".into(), "d:4".into()),
        ],
    )
    .expect("loads");
    assert_eq!(c.cluster.node_id, 3);
    assert_eq!(
        c.cluster.voters.into_iter().collect::<Vec<_>>(),
        vec![(3, "c:3".to_owned()), (4, "d:4".to_owned())]
    );
    assert_eq!(
        c.store.flush.flush_messages, 9,
        "the rest of the file stays"
    );
    let e = NodeConfig::load(None, &[("node.id".into(), "zero".into())]).expect_err("bad");
    assert!(e.to_string().contains("`node.id`"), "{e}");
    let c = NodeConfig::load(None, &[]).expect("embedded");
    assert!(c.cluster.voters.is_empty());
}

#[test]
fn unknown_keys_are_listed_and_seed_keys_are_not() {
    let c = parse(
        "controller.quorum.1 = a:1\nwriter.replica.1 = b\ncontroller.bind = tcp://*:5558\n\
         retention_hours = 1\nflush_mesages = 3\n",
    )
    .expect("parses");
    assert_eq!(c.unknown_keys, vec!["flush_mesages".to_owned()]);
    assert_eq!(keys::suggest("flush_mesages"), Some("flush_messages"));
    assert_eq!(keys::suggest("writer.engin"), Some("writer.engine"));
    assert_eq!(keys::suggest("zzz"), None);
    let warned: Vec<&str> = c.no_effect_keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(warned, ["retention_hours", "writer.replica.1"]);
    assert!(
        c.no_effect_keys[1].1.contains("--replication-factor"),
        "says what to use"
    );
}

#[test]
fn values_are_read_as_zpers_readme_writes_them() {
    // Lines of ZPER's README configuration sample (issue #15), comments and quotes included.
    let c = parse(
        "io_threads = 2                  # number of io threads\n\
         base_dir = \"/data/zper\"         # data store base directory \n\
         segment_size = 536870912        # segment file size 512M\n\
         flush_messages = 10000          # flush every N messages\n\
         writer.bind = tcp://*:5555       # writer bind address\n\
         controller.quorum.1 = tcp://10.0.0.1:9644   # target quorum 1's address\n\
         controller.quorum.2 = '10.0.0.2:9644'\n",
    )
    .expect("ZPER's sample parses");
    assert_eq!(c.io_threads, 2);
    assert_eq!(c.store.base_dir, std::path::PathBuf::from("/data/zper"));
    assert_eq!(c.store.segment_size, 536_870_912);
    assert_eq!(c.store.flush.flush_messages, 10_000);
    assert_eq!(c.writer_bind, "tcp://*:5555");
    assert_eq!(
        c.cluster.voters[&1], "10.0.0.1:9644",
        "tcp:// names the HTTP address"
    );
    assert_eq!(c.cluster.voters[&2], "10.0.0.2:9644");
    assert!(c.unknown_keys.is_empty() && c.no_effect_keys.is_empty());
}

#[test]
fn only_a_hash_after_a_blank_starts_a_comment() {
    use super::clean_value;
    assert_eq!(clean_value("  5000 # ms"), "5000");
    assert_eq!(clean_value("5000\t# ms"), "5000");
    assert_eq!(clean_value("ipc:///tmp/a#b"), "ipc:///tmp/a#b");
    assert_eq!(clean_value("\"a b\""), "a b");
    assert_eq!(clean_value("'x'  # quoted"), "x");
    assert_eq!(clean_value("\""), "\"", "a lone quote stays");
    assert_eq!(clean_value(""), "");
    // A quoted value is still checked: an empty base_dir is refused.
    let e = parse("base_dir = \"\"  # nothing\n").expect_err("empty");
    assert!(e.to_string().contains("`base_dir`"), "{e}");
}

#[test]
fn every_default_in_the_key_table_is_the_parsers_default() {
    let code = format!(
        "{:?}",
        NodeConfig::from_map(&HashMap::new()).expect("defaults")
    );
    for k in keys::KEYS.iter().filter(|k| !k.default.is_empty()) {
        let map = HashMap::from([(k.name.to_owned(), k.default.to_owned())]);
        let parsed = NodeConfig::from_map(&map).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(
            format!("{parsed:?}"),
            code,
            "key {} = {}",
            k.name,
            k.default
        );
    }
}

#[test]
fn every_key_the_parser_reads_is_in_the_table() {
    // The string literals the parser looks keys up with, as `"a.b"` / `"a_b"` in mod.rs.
    let source = include_str!("mod.rs");
    let mut read = std::collections::BTreeSet::new();
    for (i, _) in source
        .match_indices("(map, \"")
        .chain(source.match_indices("get(\""))
    {
        let rest = &source[i..];
        let start = rest.find('"').map_or(0, |q| q + 1);
        let name: String = rest[start..].chars().take_while(|c| *c != '"').collect();
        read.insert(name);
    }
    assert!(read.len() > 20, "{read:?}");
    for name in read {
        assert!(
            keys::KEYS.iter().any(|k| k.name == name),
            "{name} is parsed but missing from config::keys::KEYS"
        );
    }
    assert!(keys::is_known("controller.quorum.3"));
    assert!(keys::is_known("writer.replica.1"));
    assert!(!keys::is_known("flush_intervall"));
}

#[test]
fn the_readme_key_table_is_the_key_table() {
    let readme_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(readme_path).expect("README.md");
    let (begin, end) = ("<!-- config-keys:begin -->\n", "<!-- config-keys:end -->");
    let expected = keys::markdown();
    let (Some(b), Some(e)) = (readme.find(begin), readme.find(end)) else {
        panic!("README.md lacks the {begin:?} ... {end:?} markers");
    };
    let current = &readme[b + begin.len()..e];
    if current != expected && std::env::var_os("ZPER_BLESS").is_some() {
        let updated = format!("{}{begin}{expected}{}", &readme[..b], &readme[e..]);
        std::fs::write(readme_path, updated).expect("write README.md");
        return;
    }
    assert_eq!(
        current, expected,
        "README.md's key table differs from config::keys (ZPER_BLESS=1 rewrites it)"
    );
}

#[test]
fn every_endpoint_of_the_endpoint_table_has_its_key_and_default_here() {
    for e in zper_wire::endpoint::ALL {
        let key = keys::KEYS
            .iter()
            .find(|k| k.name == e.key)
            .unwrap_or_else(|| panic!("{} missing from config::keys", e.key));
        assert_eq!(key.default, e.default_bind(), "{}", e.key);
    }
}

#[test]
fn durations_take_units_and_bare_numbers_keep_their_old_unit() {
    let c = parse(
        "flush_interval = 1500\nreplica.lag_ms = 2s\nsubscription.lease_ms = 1m 30s\n\
         node.lease_ms = 3s\nraft.heartbeat_ms = 250ms\nraft.election_timeout_ms = 2s\n\
         dolly.put_timeout_ms = 5s\nretain_hours = 7days\n",
    )
    .expect("parses");
    assert_eq!(c.store.flush.flush_interval, Duration::from_millis(1500));
    assert_eq!(c.replica_lag, Duration::from_secs(2));
    assert_eq!(c.subscription_lease, Duration::from_secs(90));
    assert_eq!(c.cluster.lease_ms, 3000);
    assert_eq!(c.cluster.heartbeat_ms, 250);
    assert_eq!(c.cluster.election_timeout_ms, 2000);
    assert_eq!(c.dolly_put_timeout, Duration::from_secs(5));
    assert_eq!(c.store.retain, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(
        parse("retain_hours = 24").expect("hours").store.retain,
        Duration::from_secs(86_400)
    );
    for (text, key) in [
        ("replica.lag_ms = 5ms", "replica.lag_ms"),
        ("flush_interval = soon", "flush_interval"),
        ("retain_hours = 90m", "retain_hours"),
        ("node.lease_ms = -1s", "node.lease_ms"),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.to_string().contains(&format!("`{key}`")), "{text}: {e}");
    }
}

#[test]
fn the_admin_token_can_come_from_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret-from-a-secret\n").expect("write");
    let c = parse(&format!("http.admin_token_file = {}\n", file.display())).expect("parses");
    assert_eq!(
        c.cluster.admin_token.as_deref(),
        Some("s3cret-from-a-secret")
    );

    // Both keys, a missing file and an empty file are refused, each naming the key.
    let both = format!(
        "http.admin_token = x\nhttp.admin_token_file = {}\n",
        file.display()
    );
    let missing = format!(
        "http.admin_token_file = {}\n",
        dir.path().join("nope").display()
    );
    std::fs::write(dir.path().join("empty"), " \n").expect("write");
    let empty = format!(
        "http.admin_token_file = {}\n",
        dir.path().join("empty").display()
    );
    for (text, says) in [(both, "not both"), (missing, "readable"), (empty, "empty")] {
        let e = parse(&text).expect_err(&text).to_string();
        assert!(
            e.contains("`http.admin_token_file`") && e.contains(says),
            "{e}"
        );
    }
}
