//! `zper config show`: the effective node configuration, each value with its source (code
//! default, computed, the config file, or the command line), as `zper run` with the same flags
//! would read it (issue #15).

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use crate::run::RunArgs;
use crate::table::{render, Align};

/// `zper config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print every key's effective value and where it comes from; takes `zper run`'s flags.
    Show {
        /// The same flags as `zper run` (`--set KEY=VALUE`, `--node-id`, `--voters`).
        #[command(flatten)]
        run: RunArgs,
    },
}

/// Runs `zper config ...`.
///
/// Errors: a bad flag or config value (naming the key), an unreadable file.
pub fn run(command: ConfigCommand, config: Option<&Path>) -> Result<()> {
    let ConfigCommand::Show { run } = command;
    // --json: `[{"key", "value", "source": {"kind", "path"?}, "note"?}]`.
    let json = crate::output::json_output();
    let overrides = run.overrides().map_err(anyhow::Error::msg)?;
    let shown = zper_node::config::effective(config, &overrides)?;
    let text = if json {
        serde_json::to_string_pretty(&shown)? + "\n"
    } else {
        let rows = shown
            .iter()
            .map(|e| {
                let mut source = e.source.to_string();
                if let Some(note) = &e.note {
                    source = format!("{source} ({note})");
                }
                vec![e.key.clone(), e.value.clone(), source]
            })
            .collect();
        render(
            &[
                ("KEY", Align::Left),
                ("VALUE", Align::Left),
                ("SOURCE", Align::Left),
            ],
            rows,
        )
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}
