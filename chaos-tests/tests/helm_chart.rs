//! The Helm chart (`helm/zper`) and `docker-compose.yml` checked without a cluster (issues #6,
//! #15): both parse, every value a template reads is defined, and the chart rendered by Helm's
//! own engine validates against the Kubernetes schemas with everything the chart promises
//! (`scripts/check-chart.py`).

use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn chart() -> PathBuf {
    repo().join("helm/zper")
}

fn load(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn templates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(chart().join("templates"))
        .expect("templates dir")
        .map(|e| e.expect("entry").path())
        .collect();
    out.sort();
    out
}

/// Every `.Values.a.b` path in `text`.
fn value_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(".Values.") {
        rest = &rest[i + ".Values.".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect();
        out.push(
            path.trim_end_matches('.')
                .split('.')
                .map(str::to_owned)
                .collect(),
        );
    }
    out
}

#[test]
fn chart_and_values_parse() {
    let chart_yaml = &load(&chart().join("Chart.yaml"))[0];
    assert_eq!(chart_yaml["apiVersion"].as_str(), Some("v2"));
    assert_eq!(chart_yaml["name"].as_str(), Some("zper"));
    assert!(chart_yaml["version"].as_str().is_some());
    let values = &load(&chart().join("values.yaml"))[0];
    assert_eq!(values["replicas"].as_i64(), Some(3));
    assert_eq!(values["ports"]["http"].as_i64(), Some(9644));
}

#[test]
fn every_value_a_template_uses_is_defined() {
    let values = &load(&chart().join("values.yaml"))[0];
    let mut checked = 0;
    for t in templates() {
        let text = std::fs::read_to_string(&t).expect("read");
        for path in value_paths(&text) {
            let mut node = values;
            for key in &path {
                node = &node[key.as_str()];
            }
            assert!(
                !node.is_badvalue(),
                "{} uses .Values.{} which values.yaml does not define",
                t.display(),
                path.join(".")
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "the templates read their values ({checked})");
    // The check itself catches an undefined value.
    let mut node = values;
    for key in ["ports", "nosuch"] {
        node = &node[key];
    }
    assert!(node.is_badvalue());
}

#[test]
fn compose_has_three_nodes_each_with_its_own_volume() {
    let c = &load(&repo().join("docker-compose.yml"))[0];
    let services = c["services"].as_hash().expect("services");
    assert_eq!(services.len(), 3);
    let mut volumes = Vec::new();
    for (i, (name, s)) in services.iter().enumerate() {
        let name = name.as_str().expect("name");
        assert_eq!(name, format!("zper{}", i + 1));
        let cmd: Vec<&str> = s["command"]
            .as_vec()
            .expect("command")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        assert_eq!(cmd[..3], ["run", "--node-id", &(i + 1).to_string()]);
        assert!(cmd.contains(&"1=zper1:9644,2=zper2:9644,3=zper3:9644"));
        volumes.extend(
            s["volumes"]
                .as_vec()
                .expect("volumes")
                .iter()
                .filter_map(Yaml::as_str)
                .filter(|v| v.ends_with(":/data"))
                .map(str::to_owned),
        );
    }
    assert_eq!(
        volumes,
        ["zper1-data:/data", "zper2-data:/data", "zper3-data:/data"]
    );
    let published: Vec<&str> = c["services"]["zper1"]["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    for port in ["5555", "5556", "5557", "5558", "3266", "9644"] {
        assert!(
            published.contains(&format!("{port}:{port}").as_str()),
            "{port}"
        );
    }
}

/// The chart rendered by Helm's own engine and validated against the Kubernetes schemas
/// (issue #15): `scripts/check-chart.py` (helm-python-sdk renders with Helm v4's Go SDK,
/// kubernetes-validate checks every manifest strictly) also checks the "restricted" Pod
/// Security Standard, the startup probe, the token Secret, labels and every value. Without
/// its Python packages it prints a note and passes, except under `CI=true` (scripts/test
/// installs them).
#[test]
fn the_chart_renders_with_helm_and_validates_against_the_kubernetes_schemas() {
    let out = std::process::Command::new("python3")
        .arg(repo().join("scripts/check-chart.py"))
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("note: python3 not found ({e}); chart validation skipped");
            return;
        }
        Err(e) => panic!("python3: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(3) && std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("note: {text}chart validation skipped");
        return;
    }
    assert!(out.status.success(), "{text}");
    assert!(text.contains("checks passed"), "{text}");
}
