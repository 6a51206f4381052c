#!/usr/bin/env python3
"""Renders helm/zper with Helm's own engine (helm-python-sdk: Helm v4's Go SDK, no helm binary)
under several value sets, validates every manifest against the Kubernetes schemas
(kubernetes-validate, strict: unknown fields fail) and checks what the chart promises (issue #15):
the "restricted" Pod Security Standard, a startup probe, the admin token only from a Secret, the
recommended labels on every object, the values for scheduling, service account and
ServiceMonitor, the relay port on the client Service, the dashboard ConfigMap.

Exit 0 with "N checks passed"; 1 naming each failed check; 3 when the Python packages are
missing (pip install helm-python-sdk kubernetes-validate pyyaml).
"""
import json
import os
import sys

try:
    import kubernetes_validate
    import yaml
    from helm_python.chart import Chart, lint
except ImportError as e:  # the caller decides whether that fails the run
    print(f"check-chart: missing Python package ({e}); pip install helm-python-sdk "
          "kubernetes-validate pyyaml", file=sys.stderr)
    sys.exit(3)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CHART = os.path.join(ROOT, "helm", "zper")
KUBE = "1.30.0"
failures = []
passed = 0


def check(cond, what):
    global passed
    if cond:
        passed += 1
    else:
        failures.append(what)


def render(values):
    out = Chart.load(CHART).render(values, name="rel", namespace="ns")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            docs.extend((path, d) for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs, kind):
    return [d for _, d in docs if d["kind"] == kind]


def validate(docs, label):
    for path, d in docs:
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            # A CRD: no upstream schema; its shape is checked below.
            check("endpoints" in d["spec"], f"{label}: {path}: ServiceMonitor has endpoints")
            continue
        try:
            kubernetes_validate.validate(d, KUBE, strict=True)
            check(True, "")
        except Exception as e:  # ValidationError and friends
            check(False, f"{label}: {path} ({d['kind']}) is not valid Kubernetes {KUBE}: {e}")


def restricted(pod_spec, label):
    """The "restricted" Pod Security Standard (v1.30) for a pod template's spec."""
    psc = pod_spec.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, f"{label}: pod runAsNonRoot")
    check(psc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"),
          f"{label}: pod seccompProfile RuntimeDefault")
    check(psc.get("runAsUser", 1) != 0, f"{label}: pod runAsUser is not root")
    check(not pod_spec.get("hostNetwork") and not pod_spec.get("hostPID")
          and not pod_spec.get("hostIPC"), f"{label}: no host namespaces")
    allowed_volumes = {"configMap", "emptyDir", "persistentVolumeClaim", "secret", "projected",
                       "downwardAPI", "csi", "ephemeral"}
    for v in pod_spec.get("volumes", []):
        kinds = set(v) - {"name"}
        check(kinds <= allowed_volumes, f"{label}: volume {v['name']} is of an allowed type")
    for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        name = f"{label}: container {c['name']}"
        check(sc.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation false")
        check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: drops ALL capabilities")
        check(not sc.get("capabilities", {}).get("add"), f"{name}: adds no capabilities")
        check(not sc.get("privileged"), f"{name}: not privileged")
        check(sc.get("readOnlyRootFilesystem") is True, f"{name}: read-only root filesystem")
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        check("/data" in mounts, f"{name}: a writable /data volume")
        for p in c.get("ports", []):
            check("hostPort" not in p, f"{name}: no hostPort")


def main():
    # The validator is not vacuous: an unknown field and a wrong type are refused.
    for bad in ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
                 "spec": {"portz": []}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": 5}):
        try:
            kubernetes_validate.validate(bad, KUBE, strict=True)
            check(False, f"the validator accepted {bad}")
        except Exception:
            check(True, "")

    report = lint(CHART, strict=True)
    check(not report["errors"] and all(m["severity"] < 2 for m in report["messages"]),
          f"helm lint --strict: {report}")

    # Defaults.
    docs = render({})
    validate(docs, "defaults")
    for path, d in docs:
        labels = d["metadata"].get("labels", {})
        for key in ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/name",
                    "app.kubernetes.io/instance", "app.kubernetes.io/version"):
            check(key in labels, f"defaults: {path} has label {key}")
    (sts,) = by_kind(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    restricted(pod, "defaults")
    zper = pod["containers"][0]
    check(sts["spec"]["podManagementPolicy"] == "Parallel", "voters start together")
    check(zper["readinessProbe"]["httpGet"]["path"] == "/v1/status/ready", "readiness on /ready")
    check(zper["livenessProbe"]["httpGet"]["path"] == "/v1/status/live", "liveness on /live")
    check(zper.get("resources", {}).get("requests"), "resource requests")
    check(sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data", "a data PVC")
    startup = zper.get("startupProbe", {})
    check(startup.get("httpGet", {}).get("path") == "/v1/status/live", "startupProbe on /live")
    check(startup.get("periodSeconds", 0) * startup.get("failureThreshold", 0) >= 300,
          "startupProbe allows at least 5 minutes of recovery")
    check("initialDelaySeconds" not in zper["livenessProbe"],
          "liveness needs no initial delay behind the startup probe")
    anti = pod.get("affinity", {}).get("podAntiAffinity", {})
    check(anti.get("preferredDuringSchedulingIgnoredDuringExecution"),
          "voters spread over Kubernetes nodes by default")
    check(pod.get("serviceAccountName") == "rel-zper" and by_kind(docs, "ServiceAccount"),
          "a service account of the release's name")
    check(pod.get("automountServiceAccountToken") is False, "no service account token mounted")
    client = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-zper"][0]
    ports = {p["name"] for p in client["spec"]["ports"]}
    check({"writer", "reader", "controller", "relay", "dolly-requests", "http"} <= ports,
          f"client Service has the relay and every client port: {ports}")
    check(not by_kind(docs, "Secret"), "no Secret without a token")
    check(all("ZPER_ADMIN_TOKEN" != e["name"] for e in zper["env"]), "no token env without a token")
    check(not by_kind(docs, "ServiceMonitor"), "no ServiceMonitor unless enabled")
    check(len(by_kind(docs, "ConfigMap")) == 1, "no dashboard ConfigMap unless enabled")

    # A token: a Secret, read as $ZPER_ADMIN_TOKEN, never in the ConfigMap.
    docs = render({"adminToken": {"value": "s3cret"}})
    validate(docs, "token")
    (secret,) = by_kind(docs, "Secret")
    check(secret["stringData"] == {"token": "s3cret"}, "the Secret holds the token")
    (cm,) = by_kind(docs, "ConfigMap")
    check("s3cret" not in json.dumps(cm), "the ConfigMap does not hold the token")
    env = {e["name"]: e for e in by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env.get("ZPER_ADMIN_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    check(ref == {"name": "rel-zper-admin-token", "key": "token"}, f"token env from the Secret: {ref}")
    docs = render({"adminToken": {"existingSecret": "mine", "key": "t"}})
    check(not by_kind(docs, "Secret"), "an existing Secret: the chart makes none")
    env = {e["name"]: e for e in by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    check(env["ZPER_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "t"},
          "token env from the existing Secret")

    # Every scheduling, account and monitoring value reaches its object.
    values = {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "zper",
                         "effect": "NoSchedule"}],
        "podAnnotations": {"example.com/scrape": "yes"},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "zper"}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}},
        "serviceAccount": {"create": False, "name": "zper-sa"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"},
                           "annotations": {"a": "b"}},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "zper"}},
        "replicas": 5,
    }
    docs = render(values)
    validate(docs, "values")
    (sts,) = by_kind(docs, "StatefulSet")
    tpl = sts["spec"]["template"]
    pod = tpl["spec"]
    check(pod.get("nodeSelector") == {"disk": "ssd"}, "nodeSelector")
    check(pod.get("tolerations") == values["tolerations"], "tolerations")
    check(tpl["metadata"]["annotations"].get("example.com/scrape") == "yes", "podAnnotations")
    check(pod.get("topologySpreadConstraints") == values["topologySpreadConstraints"],
          "topologySpreadConstraints")
    check(pod.get("affinity") == values["affinity"], "affinity replaces the default spread")
    check(pod.get("serviceAccountName") == "zper-sa" and not by_kind(docs, "ServiceAccount"),
          "an existing service account")
    check(sts["spec"]["replicas"] == 5, "replicas")
    voters = pod["containers"][0]["args"][3]
    check(voters.count("=") == 5, f"five voters: {voters}")
    (sm,) = by_kind(docs, "ServiceMonitor")
    check(sm["metadata"]["labels"].get("release") == "prom", "serviceMonitor.labels")
    # It scrapes the client Service only (the peers Service selects the same pods).
    check(sm["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") == "client",
          "the ServiceMonitor selects the client Service")
    components = {s["metadata"]["name"]: s["metadata"]["labels"].get("app.kubernetes.io/component")
                  for s in by_kind(docs, "Service")}
    check(components == {"rel-zper": "client", "rel-zper-peers": None},
          f"only the client Service is component=client: {components}")
    check(sm["metadata"].get("annotations") == {"a": "b"}, "serviceMonitor.annotations")
    dash = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == "rel-zper-dashboard"]
    check(len(dash) == 1, "the dashboard ConfigMap")
    if dash:
        d = dash[0]
        check(d["metadata"]["labels"].get("grafana_dashboard") == "1", "sidecar label")
        with open(os.path.join(ROOT, "deploy", "grafana", "zper-dashboard.json")) as f:
            shipped = json.load(f)
        check(json.loads(d["data"]["zper-dashboard.json"]) == shipped,
              "the ConfigMap holds deploy/grafana/zper-dashboard.json")

    # TLS on the admin port (issue #19): the Secret is mounted, the config names its files, the
    # probes and the ServiceMonitor use HTTPS; no key material in the ConfigMap.
    docs = render({"tls": {"existingSecret": "zper-tls"}, "serviceMonitor": {"enabled": True}})
    validate(docs, "tls")
    (sts,) = by_kind(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    zper = pod["containers"][0]
    check({"name": "tls", "secret": {"secretName": "zper-tls"}} in pod["volumes"],
          "tls: the Secret is a volume")
    check(any(m["name"] == "tls" and m["mountPath"] == "/etc/zper-tls" and m.get("readOnly")
              for m in zper["volumeMounts"]), "tls: mounted read-only at /etc/zper-tls")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check(zper[probe]["httpGet"].get("scheme") == "HTTPS", f"tls: {probe} uses HTTPS")
    (cm,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == "rel-zper"]
    props = cm["data"]["server.properties"]
    for line in ("http.tls_cert = /etc/zper-tls/tls.crt", "http.tls_key = /etc/zper-tls/tls.key",
                 "http.tls_ca = /etc/zper-tls/ca.crt"):
        check(line in props, f"tls: the config has {line}")
    (sm,) = by_kind(docs, "ServiceMonitor")
    check(sm["spec"]["endpoints"][0].get("scheme") == "https", "tls: the ServiceMonitor scrapes HTTPS")
    docs = render({})
    (sts,) = by_kind(docs, "StatefulSet")
    zper = sts["spec"]["template"]["spec"]["containers"][0]
    check("scheme" not in zper["readinessProbe"]["httpGet"], "no TLS: probes stay HTTP")
    (cm,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == "rel-zper"]
    check("curve." not in cm["data"]["server.properties"], "no CURVE unless asked")

    # CURVE on the ZeroMQ ports (issue #19): the keys' Secret is mounted read-only, the config
    # names the cluster's key and the client keys' directory; the endpoints value passes.
    docs = render({"curve": {"existingSecret": "zper-curve", "endpoints": "replication,relay"}})
    validate(docs, "curve")
    (sts,) = by_kind(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    zper = pod["containers"][0]
    check({"name": "curve", "secret": {"secretName": "zper-curve"}} in pod["volumes"],
          "curve: the Secret is a volume")
    check(any(m["name"] == "curve" and m["mountPath"] == "/etc/zper-curve" and m.get("readOnly")
              for m in zper["volumeMounts"]), "curve: mounted read-only at /etc/zper-curve")
    (cm,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == "rel-zper"]
    props = cm["data"]["server.properties"]
    for line in ("curve.secret_key_file = /etc/zper-curve/cluster.key_secret",
                 "curve.clients = /etc/zper-curve", "curve.endpoints = replication,relay"):
        check(line in props, f"curve: the config has {line}")

    if failures:
        for f in failures:
            print(f"check-chart: FAILED: {f}", file=sys.stderr)
        print(f"{passed} passed, {len(failures)} failed")
        sys.exit(1)
    print(f"check-chart: {passed} checks passed")


main()
