//! The Helm chart (`helm/zper`) and `docker-compose.yml` checked without `helm` or a cluster
//! (issue #6): both parse, every value a template reads is defined, every template renders to
//! well-formed YAML shape once its template actions are replaced by placeholders.

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

/// Replaces Go template actions: a line holding only a control action (`if`, `else`, `end`,
/// `range`, `with`, `define`, comments) is dropped; a line holding only another action (an
/// `include ... | nindent`, `toYaml`) becomes a placeholder mapping entry at its indentation;
/// an action inside a line becomes the scalar `PLACEHOLDER`.
fn placeholders(template: &str) -> String {
    let mut out = String::new();
    for line in template.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("{{")
            && trimmed.ends_with("}}")
            && trimmed.matches("{{").count() == 1
        {
            let inner = trimmed
                .trim_start_matches("{{")
                .trim_start_matches('-')
                .trim_end_matches("}}")
                .trim_end_matches('-')
                .trim();
            let control = ["if ", "else", "end", "range ", "with ", "define ", "/*"]
                .iter()
                .any(|k| inner.starts_with(k));
            if !control {
                let indent = line.len() - line.trim_start().len();
                out.push_str(&" ".repeat(indent));
                out.push_str("placeholder: PLACEHOLDER\n");
            }
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            match rest[start..].find("}}") {
                Some(end) => {
                    out.push_str("PLACEHOLDER");
                    rest = &rest[start + end + 2..];
                }
                None => panic!("unclosed template action in line {line:?}"),
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
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
fn every_template_is_well_formed_yaml_with_placeholders() {
    let mut kinds = Vec::new();
    for t in templates() {
        let name = t.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with('_') || !name.ends_with(".yaml") {
            continue;
        }
        let text = placeholders(&std::fs::read_to_string(&t).expect("read"));
        let docs = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{name} is not well-formed YAML: {e}\n{text}"));
        for d in docs.iter().filter(|d| !d.is_null()) {
            assert!(d["apiVersion"].as_str().is_some(), "{name}: apiVersion");
            kinds.push(d["kind"].as_str().expect("kind").to_owned());
        }
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "ConfigMap",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceMonitor",
            "StatefulSet"
        ]
    );
    // A broken template is caught.
    assert!(YamlLoader::load_from_str(&placeholders("a: [1\nb: {{ .Values.x }}\n")).is_err());
}

#[test]
fn the_statefulset_is_what_the_issue_asks_for() {
    let text = placeholders(
        &std::fs::read_to_string(chart().join("templates/statefulset.yaml")).expect("read"),
    );
    let s = &YamlLoader::load_from_str(&text).expect("yaml")[0];
    assert_eq!(s["spec"]["podManagementPolicy"].as_str(), Some("Parallel"));
    let c = &s["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/v1/status/ready")
    );
    assert!(c["livenessProbe"]["httpGet"]["path"].as_str().is_some());
    assert!(!c["resources"].is_badvalue());
    assert_eq!(
        s["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str(),
        Some("data")
    );
    assert_eq!(
        s["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true)
    );
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

#[test]
fn the_service_monitor_scrapes_only_the_client_service() {
    let doc = |name: &str| {
        let text = placeholders(
            &std::fs::read_to_string(chart().join("templates").join(name)).expect("read"),
        );
        YamlLoader::load_from_str(&text).expect("yaml")[0].clone()
    };
    let monitor = doc("servicemonitor.yaml");
    let component = &monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"];
    assert_eq!(component.as_str(), Some("client"));
    assert_eq!(
        doc("service.yaml")["metadata"]["labels"]["app.kubernetes.io/component"].as_str(),
        Some("client")
    );
    assert!(
        doc("service-peers.yaml")["metadata"]["labels"]["app.kubernetes.io/component"]
            .is_badvalue()
    );
}
