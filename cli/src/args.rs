//! The `zper` command line's arguments: run a node (default), produce, consume, subscribe,
//! topics, cluster, dolly and perf tools (spec `zper.md` §10). Each command's flags live in its
//! own module.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{config, consume, dolly, output, perf, produce, run, subscribe};

/// zper: a ZeroMQ persistence broker speaking ZPER's protocol.
#[derive(Debug, Parser)]
#[command(name = "zper", version, about)]
pub struct Cli {
    /// A server.properties-style config file (default: the embedded one, data under ./data).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// JSON output: the API's JSON for topics and cluster, one object per message for consume,
    /// one object per reply for dolly, a summary object for produce, perf and config show
    /// (subscribe prints text).
    #[arg(long, global = true)]
    pub json: bool,
    /// The node's CURVE public key (40 Z85 characters, or its NAME.key file) when its
    /// endpoints require CURVE (`curve.secret_key_file`): produce, consume, subscribe, dolly
    /// and perf use it; with --curve-secret-key-file.
    #[arg(
        long,
        global = true,
        env = "ZPER_CURVE_SERVER_KEY",
        value_name = "KEY|FILE"
    )]
    pub curve_server_key: Option<String>,
    /// This client's CURVE key pair (`zper keygen NAME` writes NAME.key_secret); its public
    /// key must be among the node's `curve.clients`.
    #[arg(
        long,
        global = true,
        env = "ZPER_CURVE_SECRET_KEY_FILE",
        value_name = "FILE"
    )]
    pub curve_secret_key_file: Option<PathBuf>,
    /// What to do (default: run a node).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node (the default when no subcommand is given).
    Run(run::RunArgs),
    /// Send messages to a topic: the arguments, or stdin lines when there are none.
    Produce(produce::ProduceArgs),
    /// Print a topic's messages from an offset, optionally following the log.
    Consume(consume::ConsumeArgs),
    /// Join a subscription group and print the records pushed to it, acknowledging each batch.
    Subscribe(subscribe::SubscribeArgs),
    /// Measure throughput and latency against a running node.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
    /// Topics through the HTTP admin API: list, create, describe, alter, delete.
    Topics {
        /// What to do.
        #[command(subcommand)]
        command: crate::topics::TopicsCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: output::AdminTarget,
    },
    /// Dolly's key/value map over Dolly's protocol: get KEY..., put KEY VALUE.
    Dolly {
        /// What to do.
        #[command(subcommand)]
        command: dolly::DollyCommand,
        /// Which node, and the reply timeout.
        #[command(flatten)]
        target: dolly::DollyTarget,
    },
    /// The cluster through the HTTP admin API: status, ready, add-node, remove-node.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: crate::cluster::ClusterCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: output::AdminTarget,
    },
    /// The node configuration: `show` prints each key's effective value and its source.
    Config {
        /// What to do.
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Make a CURVE key pair: NAME.key (public) and NAME.key_secret (secret), czmq's format.
    Keygen(crate::keygen::KeygenArgs),
    /// Print a shell completion script: `zper completions bash > /etc/bash_completion.d/zper`,
    /// `zper completions zsh > ~/.zfunc/_zper`, `zper completions fish >
    /// ~/.config/fish/completions/zper.fish`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Each short flag's one meaning, as the long names that carry it (issue #15: `-w` was
    /// writer and window, `-t` topic and timeout, `-n` count and name, `-c` controller and
    /// concurrency). `-c` is concurrency as in ZPER's perf tools (spec `zper.md` §10.2).
    const MEANINGS: &[(char, &str, &[&str])] = &[
        ('t', "topic", &["topic"]),
        ('w', "writer endpoint", &["writer", "writerinfo"]),
        ('r', "reader endpoint", &["reader", "readerinfo"]),
        ('C', "controller endpoints", &["controller"]),
        (
            'e',
            "Dolly (or etcd) endpoint(s)",
            &["endpoint", "endpoints"],
        ),
        ('p', "Dolly peers file", &["peers"]),
        (
            'n',
            "how many (messages, requests, commits)",
            &["messages", "max-messages", "requests", "commits", "count"],
        ),
        (
            'c',
            "concurrency (threads, sockets, writers)",
            &["threads", "dealers", "concurrency", "clients"],
        ),
        (
            's',
            "a size in bytes",
            &["message-size", "fetch-size", "value-size"],
        ),
        ('m', "ack mode", &["mode"]),
        ('f', "follow", &["follow"]),
        ('g', "subscription group", &["group"]),
        ('k', "reader threads", &["readers"]),
        ('h', "help", &["help"]),
        ('V', "version", &["version"]),
    ];

    /// Every (short, long, command path) in the command tree.
    fn shorts(cmd: &clap::Command, path: &str, out: &mut Vec<(char, String, String)>) {
        for arg in cmd.get_arguments() {
            if let Some(short) = arg.get_short() {
                let long = arg.get_long().unwrap_or("").to_owned();
                out.push((short, long, path.to_owned()));
            }
        }
        for sub in cmd.get_subcommands() {
            shorts(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn a_topic_name_outside_the_rule_is_refused_by_clap() {
        let e = Cli::try_parse_from(["zper", "consume", "-t", "my-topic"]).expect_err("an error");
        assert!(e.to_string().contains("ASCII letters or digits"), "{e}");
    }

    #[test]
    fn old_spellings_keep_working_and_durations_take_units() {
        use clap::Parser;
        let old = Cli::try_parse_from([
            "zper",
            "subscribe",
            "-t",
            "x",
            "--idle-ms",
            "1500",
            "--flush-ms",
            "20",
        ])
        .expect("old spellings");
        let new = Cli::try_parse_from([
            "zper",
            "subscribe",
            "-t",
            "x",
            "--idle",
            "1.5s",
            "--flush",
            "20ms",
        ])
        .expect("units");
        for cli in [old, new] {
            let Some(super::Command::Subscribe(a)) = cli.command else {
                panic!("subscribe");
            };
            assert_eq!(a.idle, std::time::Duration::from_millis(1500));
            assert_eq!(a.flush, std::time::Duration::from_millis(20));
        }
        for args in [
            ["zper", "consume", "-t", "x", "--timeout", "5000"],
            ["zper", "consume", "-t", "x", "--timeout", "5s"],
            ["zper", "produce", "-t", "x", "--timeout", "5s"],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
        let retry = Cli::try_parse_from(["zper", "perf", "metadata", "--retry-ms", "20000"]);
        assert!(retry.is_ok(), "perf metadata --retry-ms");
    }

    #[test]
    fn every_short_flag_has_one_meaning_across_every_subcommand() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut found = Vec::new();
        shorts(&cmd, "zper", &mut found);
        let table: BTreeMap<char, (&str, &[&str])> = MEANINGS
            .iter()
            .map(|(c, m, longs)| (*c, (*m, *longs)))
            .collect();
        let mut wrong = Vec::new();
        for (short, long, path) in &found {
            match table.get(short) {
                Some((_, longs)) if longs.contains(&long.as_str()) => {}
                Some((meaning, _)) => wrong.push(format!(
                    "{path}: -{short} is --{long}, but -{short} means {meaning}"
                )),
                None => wrong.push(format!(
                    "{path}: -{short} (--{long}) has no entry in MEANINGS"
                )),
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(
            found.iter().any(|(s, _, _)| *s == 't'),
            "the walk found the flags"
        );
    }
}
