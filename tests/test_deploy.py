"""Issue 13 item 6: `deploy/kubernetes/` is a Kustomize base that applies as is, checked offline.

The base is rendered with `kubectl kustomize` when kubectl is on PATH, else by this module itself
(`render_offline`: the `resources` files and the `configMapGenerator` ConfigMap, refusing any other
Kustomize feature so the two renderings cannot drift; where both exist a test compares them). Then:

- every built-in object validates against the Kubernetes OpenAPI schemas bundled with
  `kubernetes-validate` (strict: unknown fields are errors, as `kubectl apply`'s default
  `--validate=strict` makes them), for the oldest and the newest minor version checked;
- the `PodMonitoring` validates against the v1 schema of the real CRD (tests/fixtures/k8s/, header
  names repository, path and commit), also strictly, with the checks the operator adds;
- the ConfigMap's gpucost.toml loads through `monitor.config.load_config`, as `gpucost check` and
  `gpucost run --config` load it, and is the production setup (BigQuery, Cloud Monitoring, Slack);
- the security properties hold: non-root with the image's own uid, read-only root filesystem, every
  path the daemon writes on a writable volume, the Slack token only through a `secretKeyRef`, the
  probes and the scrape on the port the config's `[http]` section serves.

Each check is a pure function returning the problems it found; `test_checks_catch_a_broken_base`
breaks a rendered copy once per check and asserts the check names the break, so none of them passes
vacuously. The image's user, port, working directory and environment are read from deploy/Dockerfile.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from monitor.config import Config, load_config

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "deploy" / "kubernetes"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
PODMONITORING_SCHEMA = REPO / "tests" / "fixtures" / "k8s" / "podmonitoring-v1.schema.yaml"
CONFIG_KEY = "gpucost.toml"

#: GKE supports a minor version for up to 24 months after it reaches the Regular channel
#: (https://cloud.google.com/kubernetes-engine/versioning): from 1.31 to the newest bundled schema.
K8S_VERSIONS = ("1.31.0", kubernetes_validate.latest_version())

#: Kustomization keys `render_offline` implements; anything else must be rendered by kubectl.
_OFFLINE_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator"}

#: The Workload Identity annotation on a Kubernetes ServiceAccount naming the IAM service account it
#: acts as (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity).
WI_ANNOTATION = "iam.gke.io/gcp-service-account"
_SA_EMAIL = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]+\.iam\.gserviceaccount\.com$")

#: A Prometheus duration, as prometheus/common `model.ParseDuration` accepts it (the operator parses
#: `interval` and `timeout` with it: prometheus-engine pkg/operator/apis/monitoring/v1/common_types.go).
_PROM_DURATION = re.compile(
    r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$"
)
_DURATION_MS = {
    "y": 365 * 86400_000,
    "w": 7 * 86400_000,
    "d": 86400_000,
    "h": 3600_000,
    "m": 60_000,
    "s": 1000,
    "ms": 1,
}

#: An image reference with an explicit tag or digest; path components are lowercase (the grammar of
#: https://github.com/distribution/reference, reference.go), so a placeholder such as MY_PROJECT is not.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(
    rf"^[A-Za-z0-9.-]+(?::[0-9]+)?(?:/{_PATH_COMPONENT})+(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}|@sha256:[0-9a-f]{{64}})$"
)

Obj = dict[str, Any]


# -- rendering ---------------------------------------------------------------------------------------


def render_kubectl(base: Path) -> list[Obj]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(base)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, f"kubectl kustomize {base} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render_offline(base: Path) -> list[Obj]:
    """What `kubectl kustomize` renders for this base, less the ConfigMap name's content hash."""
    kust = yaml.safe_load((base / "kustomization.yaml").read_text(encoding="utf-8"))
    unknown = set(kust) - _OFFLINE_KEYS
    assert not unknown, f"render_offline does not implement {sorted(unknown)}: extend it or drop them"
    objs: list[Obj] = []
    for gen in kust.get("configMapGenerator", []):
        assert set(gen) <= {"name", "files"}, f"configMapGenerator keys {sorted(gen)} not implemented"
        data = {}
        for f in gen["files"]:
            key, _, path = f.rpartition("=") if "=" in f else (Path(f).name, "", f)
            data[key] = (base / path).read_text(encoding="utf-8")
        objs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data}
        )
    for res in kust["resources"]:
        text = (base / res).read_text(encoding="utf-8")
        objs.extend(d for d in yaml.safe_load_all(text) if d)
    return objs


def _without_hash(objs: list[Obj]) -> list[Obj]:
    """kubectl's rendering with `gpucost-config-<hash>` named `gpucost-config`, in a stable order."""
    out = copy.deepcopy(objs)
    for o in out:
        if o["kind"] == "ConfigMap":
            o["metadata"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"])
        for v in o.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "configMap" in v:
                v["configMap"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", v["configMap"]["name"])
    return sorted(out, key=lambda o: (o["kind"], o["metadata"]["name"]))


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return render_kubectl(BASE) if shutil.which("kubectl") else render_offline(BASE)


# -- the image, the objects, the config --------------------------------------------------------------


def dockerfile_final_stage(text: str) -> dict[str, Any]:
    """USER, EXPOSE, WORKDIR and ENV of the last stage (the image that runs)."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    last_from = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM "))
    stage: dict[str, Any] = {"env": {}, "expose": [], "user": None, "workdir": "/"}
    for ln in lines[last_from + 1 :]:
        word, _, rest = ln.partition(" ")
        word = word.upper()
        if word == "ENV":
            stage["env"].update(kv.split("=", 1) for kv in shlex.split(rest))
        elif word == "EXPOSE":
            stage["expose"] += [int(p.split("/")[0]) for p in rest.split()]
        elif word == "USER":
            stage["user"] = rest.strip()
        elif word == "WORKDIR":
            stage["workdir"] = str(PurePosixPath(stage["workdir"]) / rest.strip())
    return stage


def one(objs: list[Obj], kind: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(objs: list[Obj]) -> Obj:
    return one(objs, "Deployment")["spec"]["template"]["spec"]


def container(objs: list[Obj]) -> Obj:
    cs = pod_spec(objs)["containers"]
    assert len(cs) == 1, "one container: the daemon"
    return cs[0]


def config_path_arg(c: Obj) -> str:
    args = [*c.get("command", []), *c.get("args", [])]
    assert "--config" in args, f"the container must run with --config (args {args})"
    return args[args.index("--config") + 1]


def mounted_config_text(objs: list[Obj]) -> str:
    """The text the daemon reads at its --config path, through the volume that mounts a ConfigMap."""
    c, spec = container(objs), pod_spec(objs)
    target = PurePosixPath(config_path_arg(c))
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        cm = volumes.get(m["name"], {}).get("configMap")
        if cm is None:
            continue
        mount = PurePosixPath(m["mountPath"])
        if "subPath" in m and mount == target:
            key = m["subPath"]
        elif "subPath" not in m and mount in target.parents:
            key = str(target.relative_to(mount))
        else:
            continue
        maps = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm["name"]]
        assert maps, f"volume {m['name']} mounts ConfigMap {cm['name']}, which the base does not render"
        assert key in maps[0].get("data", {}), f"ConfigMap {cm['name']} has no key {key}"
        return maps[0]["data"][key]
    raise AssertionError(f"no ConfigMap volume is mounted at {target}")


def load_mounted_config(objs: list[Obj], tmp: Path) -> Config:
    path = tmp / CONFIG_KEY
    path.write_text(mounted_config_text(objs), encoding="utf-8")
    return load_config(path)  # what `gpucost check --config` and `gpucost run --config` call


def container_env(objs: list[Obj], image: dict[str, Any]) -> dict[str, str]:
    """The process environment's plain values: the image's ENV, overridden by the container's env."""
    env = dict(image["env"])
    for e in container(objs).get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env.pop(e["name"], None)
    return env


def working_dir(objs: list[Obj], image: dict[str, Any]) -> PurePosixPath:
    return PurePosixPath(container(objs).get("workingDir") or image["workdir"])


def written_paths(cfg: Config, env: dict[str, str], cwd: PurePosixPath) -> dict[str, PurePosixPath]:
    """Every directory the daemon writes in, by why (relative config paths resolve against `cwd`).

    Observed: a production-config daemon (tests/test_daemon_production.py under strace) wrote only the
    SQLite store with its -journal/-wal/-shm files beside it and matplotlib's config and font cache;
    a demo cycle (DuckDB file, console alerts, the digest and its chart) run with the root filesystem
    mounted read-only wrote only under its working directory and `MPLCONFIGDIR`.
    """
    out: dict[str, PurePosixPath] = {}
    if cfg.state.url.startswith("sqlite:///"):  # monitor/state/store.py open_store
        out["state.url (the SQLite file and its journal)"] = (
            cwd / cfg.state.url.removeprefix("sqlite:///")
        ).parent
    out["alerts.console_dir"] = cwd / cfg.alerts.console_dir
    out["digest.out_dir"] = cwd / cfg.digest.out_dir
    if cfg.billing.source == "duckdb":
        out["billing.db"] = (cwd / cfg.billing.db).parent
    if cfg.demo.enabled:
        out["demo.data_dir"] = cwd / cfg.demo.data_dir
    # An in-memory DuckDB (attribution rule checks) spills to ./.tmp (DuckDB's temp_directory default).
    out["working directory"] = cwd
    out["TMPDIR (Python's tempfile)"] = PurePosixPath(env.get("TMPDIR", "/tmp"))
    if "MPLCONFIGDIR" in env:  # matplotlib's config and cache directory, else under HOME
        out["MPLCONFIGDIR (matplotlib's font cache)"] = PurePosixPath(env["MPLCONFIGDIR"])
    else:
        home = PurePosixPath(env.get("HOME", "/"))
        out["HOME/.config/matplotlib"] = home / ".config/matplotlib"
        out["HOME/.cache/matplotlib"] = home / ".cache/matplotlib"
    return out


def resolve_port(c: Obj, port: int | str) -> int | None:
    if isinstance(port, int):
        return port
    named = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    return named.get(port)


def numeric_user(user: str | None) -> int | None:
    uid = (user or "").split(":")[0]
    return int(uid) if uid.isdigit() else None


# -- the checks: each returns the problems it found ---------------------------------------------------


def check_builtin_schemas(objs: list[Obj]) -> list[str]:
    problems = []
    for o in objs:
        if o["kind"] == "PodMonitoring":
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.absolute_path)
                problems.append(f"{o['kind']}/{o['metadata']['name']} (k8s {version}): {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                problems.append(e.message)
    return problems


def _strict(schema: Any) -> Any:
    """Unknown fields are errors: `additionalProperties: false` wherever the CRD lists properties."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _duration_ms(text: str) -> int:
    return sum(int(n) * _DURATION_MS[u] for n, u in re.findall(r"([0-9]+)(ms|y|w|d|h|m|s)", text))


def check_podmonitoring(objs: list[Obj]) -> list[str]:
    crd = yaml.safe_load(PODMONITORING_SCHEMA.read_text(encoding="utf-8"))
    pm = one(objs, crd["kind"])
    problems = []
    want = f"{crd['group']}/{crd['version']}"
    if pm["apiVersion"] != want or not crd["served"]:
        problems.append(f"PodMonitoring apiVersion {pm['apiVersion']}, the served version is {want}")
    formats = jsonschema.FormatChecker(formats=())
    formats.checks("duration")(
        lambda v: not isinstance(v, str) or (v != "" and bool(_PROM_DURATION.match(v)))
    )
    validator = jsonschema.Draft202012Validator(_strict(crd["openAPIV3Schema"]), format_checker=formats)
    for e in validator.iter_errors(pm):
        problems.append(f"PodMonitoring {'.'.join(str(p) for p in e.absolute_path)}: {e.message}")
    for ep in pm.get("spec", {}).get("endpoints", []):  # the CRD's CEL rule on an endpoint
        if "timeout" in ep and _duration_ms(ep["timeout"]) > _duration_ms(ep.get("interval", "")):
            problems.append("PodMonitoring endpoint timeout is greater than its interval")
    return problems


def check_production_config(cfg: Config) -> list[str]:
    problems = []
    expect = {
        "google.credentials": (cfg.google.credentials, "default"),  # ADC: Workload Identity on GKE
        "billing.source": (cfg.billing.source, "bigquery"),
        "utilization.source": (cfg.utilization.source, "cloud_monitoring"),
        "http.enabled": (cfg.http.enabled, True),
        "http.host": (cfg.http.host, "0.0.0.0"),  # the kubelet and the scraper come from outside the pod
        "demo.enabled": (cfg.demo.enabled, False),
    }
    for key, (got, want) in expect.items():
        if got != want:
            problems.append(f"{key} = {got!r}, production needs {want!r}")
    if not cfg.slack.channel:
        problems.append("slack.channel is not set: alerts would not go to Slack")
    return problems


def check_security(objs: list[Obj], image: dict[str, Any]) -> list[str]:
    spec, c = pod_spec(objs), container(objs)
    pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})

    def effective(key: str) -> Any:  # the container's setting overrides the pod's
        return sc.get(key, pod_sc.get(key))

    problems = []
    uid, image_uid = effective("runAsUser"), numeric_user(image["user"])
    if effective("runAsNonRoot") is not True:
        problems.append("runAsNonRoot is not true")
    if image_uid is None:
        problems.append(
            f"the Dockerfile's USER {image['user']!r} is not numeric: runAsNonRoot cannot verify it"
        )
    if uid in (None, 0) or uid != image_uid:
        problems.append(f"runAsUser {uid} is not the image's non-root user {image_uid}")
    if pod_sc.get("fsGroup") is None:
        problems.append("no fsGroup: the non-root user may not write the state volume")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append("readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        problems.append("the container is privileged")
    if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
        problems.append(f"capabilities {sc.get('capabilities')} do not drop ALL")
    if (effective("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("seccompProfile is not RuntimeDefault")
    if any("hostPath" in v for v in spec.get("volumes", [])):
        problems.append("a hostPath volume")
    return problems


def check_writable_paths(objs: list[Obj], cfg: Config, image: dict[str, Any]) -> list[str]:
    """Every path the daemon writes is inside a writable emptyDir or PersistentVolumeClaim mount."""
    c, spec = container(objs), pod_spec(objs)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    writable = [
        PurePosixPath(m["mountPath"])
        for m in c.get("volumeMounts", [])
        if not m.get("readOnly") and {"emptyDir", "persistentVolumeClaim"} & set(volumes.get(m["name"], {}))
    ]
    problems = []
    cwd = working_dir(objs, image)
    for why, path in written_paths(cfg, container_env(objs, image), cwd).items():
        if not any(path == m or m in path.parents for m in writable):
            problems.append(
                f"{why}: {path} is on the read-only root filesystem (writable mounts: {writable})"
            )
    return problems


def check_slack_token(objs: list[Obj], cfg: Config) -> list[str]:
    c = container(objs)
    problems = []
    if any(o["kind"] == "Secret" for o in objs):
        problems.append("the base renders a Secret: the token's Secret is created by hand, never committed")
    if c.get("envFrom"):
        problems.append("envFrom imports a whole object into the environment")
    token = [e for e in c.get("env", []) if e["name"] == "SLACK_BOT_TOKEN"]
    ref = token[0].get("valueFrom", {}).get("secretKeyRef") if token else None
    if not token or "value" in token[0] or not ref or not ref.get("name") or not ref.get("key"):
        problems.append(f"SLACK_BOT_TOKEN is not read from a secretKeyRef: {token}")
    elif ref.get("optional"):
        problems.append("the token's secretKeyRef is optional: without it alerts go to a file, silently")
    if cfg.slack.token_file is not None:
        problems.append("slack.token_file is set: the token comes from SLACK_BOT_TOKEN")
    for o in objs:
        if o["kind"] == "ConfigMap" and re.search(r"xox[abpr]-", yaml.safe_dump(o.get("data", {}))):
            problems.append(f"ConfigMap {o['metadata']['name']} holds a Slack token")
    return problems


def check_ports_and_probes(objs: list[Obj], cfg: Config, image: dict[str, Any]) -> list[str]:
    c = container(objs)
    port = cfg.http.port
    problems = []
    if port not in image["expose"]:
        problems.append(f"[http] port {port} is not the image's EXPOSE {image['expose']}")
    if port not in [p["containerPort"] for p in c.get("ports", [])]:
        problems.append(f"[http] port {port} is not a containerPort")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or resolve_port(c, get.get("port", 0)) != port:
            problems.append(f"{probe} is {get}, not GET {path} on port {port}")
    startup = c.get("startupProbe", {}).get("httpGet")
    if startup is not None and (
        startup.get("path") != "/healthz" or resolve_port(c, startup.get("port", 0)) != port
    ):
        problems.append(f"startupProbe is {startup}, not GET /healthz on port {port}")
    pm = one(objs, "PodMonitoring")
    labels = one(objs, "Deployment")["spec"]["template"]["metadata"].get("labels", {})
    selector = pm["spec"].get("selector", {}).get("matchLabels", {})
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f"PodMonitoring selector {selector} does not select the pod (labels {labels})")
    for ep in pm["spec"].get("endpoints", []):
        if resolve_port(c, ep.get("port", 0)) != port or ep.get("path", "/metrics") != "/metrics":
            problems.append(f"PodMonitoring scrapes {ep}, not /metrics on port {port}")
    return problems


def check_identity_and_state(objs: list[Obj], cfg: Config) -> list[str]:
    dep, spec = one(objs, "Deployment"), pod_spec(objs)
    sa, pvc = one(objs, "ServiceAccount"), one(objs, "PersistentVolumeClaim")
    problems = []
    email = sa["metadata"].get("annotations", {}).get(WI_ANNOTATION, "")
    if not _SA_EMAIL.match(email):
        problems.append(f"ServiceAccount {WI_ANNOTATION} = {email!r}, not an IAM service account email")
    if spec.get("serviceAccountName") != sa["metadata"]["name"]:
        problems.append(
            f"the pod runs as {spec.get('serviceAccountName')!r}, not ServiceAccount {sa['metadata']['name']}"
        )
    if dep["spec"].get("replicas") != 1 or dep["spec"].get("strategy", {}).get("type") != "Recreate":
        problems.append("not one replica with strategy Recreate: two writers on the state store")
    claims = [
        v
        for v in spec.get("volumes", [])
        if v.get("persistentVolumeClaim", {}).get("claimName") == pvc["metadata"]["name"]
    ]
    if not claims:
        problems.append(f"no volume uses PersistentVolumeClaim {pvc['metadata']['name']}")
    else:
        mounts = [m for m in container(objs).get("volumeMounts", []) if m["name"] == claims[0]["name"]]
        state = PurePosixPath(cfg.state.url.removeprefix("sqlite:///"))
        if not mounts or PurePosixPath(mounts[0]["mountPath"]) not in state.parents:
            problems.append(f"the state store {state} is not on the PersistentVolumeClaim")
    if pvc["spec"].get("accessModes") != ["ReadWriteOnce"]:
        problems.append(f"PVC access modes {pvc['spec'].get('accessModes')}, want ReadWriteOnce")
    return problems


def check_image_and_resources(objs: list[Obj]) -> list[str]:
    c = container(objs)
    res = c.get("resources", {})
    problems = [
        f"no resources.{k}.{r}"
        for k in ("requests", "limits")
        for r in ("cpu", "memory")
        if r not in res.get(k, {})
    ]
    if not _IMAGE_REF.match(c.get("image", "")):
        problems.append(
            f"image {c.get('image')!r} is not a registry/path:tag reference (lowercase path, a tag or digest)"
        )
    return problems


# -- the tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    return dockerfile_final_stage(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cfg(rendered: list[Obj], tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_mounted_config(rendered, tmp_path_factory.mktemp("deploy"))


def test_base_renders_one_object_per_manifest(rendered: list[Obj]) -> None:
    kinds = sorted(o["kind"] for o in rendered)
    assert kinds == ["ConfigMap", "Deployment", "PersistentVolumeClaim", "PodMonitoring", "ServiceAccount"]
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    for res in kust["resources"]:
        docs = [d for d in yaml.safe_load_all((BASE / res).read_text(encoding="utf-8")) if d]
        assert len(docs) == 1, f"{res}: one object per file"
    assert not (BASE / "gpucost.yaml").exists(), "the old single-file manifest is replaced by the base"


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl not on PATH: the base was rendered offline"
)
def test_offline_rendering_is_what_kubectl_renders() -> None:
    assert _without_hash(render_kubectl(BASE)) == _without_hash(render_offline(BASE))


def test_builtin_objects_validate_against_kubernetes_schemas(rendered: list[Obj]) -> None:
    assert check_builtin_schemas(rendered) == []


def test_podmonitoring_validates_against_the_crd(rendered: list[Obj]) -> None:
    assert check_podmonitoring(rendered) == []


def test_configmap_is_a_valid_production_config(rendered: list[Obj], cfg: Config) -> None:
    assert mounted_config_text(rendered) == (BASE / CONFIG_KEY).read_text(encoding="utf-8")
    assert check_production_config(cfg) == []


def test_configmap_config_is_the_production_example_with_its_paths() -> None:
    """deploy/kubernetes/gpucost.toml follows deploy/config/production.example.toml: the same settings,
    plus the directories the pod writes made explicit (a key added to the example must be added here)."""
    example = tomllib.loads((REPO / "deploy/config/production.example.toml").read_text(encoding="utf-8"))
    k8s = tomllib.loads((BASE / CONFIG_KEY).read_text(encoding="utf-8"))
    assert k8s["alerts"].pop("console_dir").startswith("/var/lib/gpucost/")
    assert k8s["digest"].pop("out_dir").startswith("/var/lib/gpucost/")
    assert k8s == example


def test_runs_as_the_images_non_root_user_on_a_read_only_root(
    rendered: list[Obj], image: dict[str, Any]
) -> None:
    assert check_security(rendered, image) == []


def test_every_path_the_daemon_writes_is_a_volume(
    rendered: list[Obj], cfg: Config, image: dict[str, Any]
) -> None:
    assert check_writable_paths(rendered, cfg, image) == []


def test_slack_token_only_through_a_secret_reference(rendered: list[Obj], cfg: Config) -> None:
    assert check_slack_token(rendered, cfg) == []


def test_probes_and_scrape_use_the_configs_http_port(
    rendered: list[Obj], cfg: Config, image: dict[str, Any]
) -> None:
    assert check_ports_and_probes(rendered, cfg, image) == []


def test_workload_identity_one_writer_and_resources(rendered: list[Obj], cfg: Config) -> None:
    assert check_identity_and_state(rendered, cfg) == [] and check_image_and_resources(rendered) == []


# -- every check can fail ----------------------------------------------------------------------------


Edit = Callable[[list[Obj]], None]


def _node(objs: list[Obj], where: str) -> Any:
    """A node to break: `pod.securityContext`, `PodMonitoring.spec.endpoints.0`, `container.env.name=X`."""
    head, *rest = where.split(".")
    node: Any = {"pod": lambda: pod_spec(objs), "container": lambda: container(objs)}.get(
        head, lambda: one(objs, head)
    )()
    for part in rest:
        if isinstance(node, list):  # an index, or `key=value` for the element that has it
            key, _, value = part.partition("=")
            node = next(e for e in node if e.get(key) == value) if value else node[int(part)]
        else:
            node = node[part]
    return node


def _set(where: str, key: str, value: Any) -> Edit:
    return lambda objs: _node(objs, where).update({key: value})


def _del(where: str, key: str) -> Edit:
    return lambda objs: _node(objs, where).pop(key)


def _config(old: str, new: str) -> Edit:
    def edit(objs: list[Obj]) -> None:
        data = one(objs, "ConfigMap")["data"]
        assert old in data[CONFIG_KEY], old
        data[CONFIG_KEY] = data[CONFIG_KEY].replace(old, new, 1)

    return edit


def _env(name: str, value: str) -> Edit:
    def edit(objs: list[Obj]) -> None:
        c = container(objs)
        c["env"] = [e for e in c["env"] if e["name"] != name] + [{"name": name, "value": value}]

    return edit


def _mount(path: str, readonly: bool | None) -> Edit:
    """The mount at `path` made read-only, or removed (None)."""

    def edit(objs: list[Obj]) -> None:
        mounts = container(objs)["volumeMounts"]
        m = next(m for m in mounts if m["mountPath"] == path)
        m.update(readOnly=True) if readonly else mounts.remove(m)

    return edit


_SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "gpucost-slack"},
    "stringData": {"token": "x"},
}
_EP = "PodMonitoring.spec.endpoints.0"
_TOKEN_REF = "container.env.name=SLACK_BOT_TOKEN.valueFrom.secretKeyRef"

#: (the break, the check that must catch it, a fragment of the problem it must report, the edit)
BREAKS: list[tuple[str, str, str, Edit]] = [
    ("unknown field", "schemas", "readinessprobe", _set("container", "readinessprobe", {})),
    ("wrong type", "schemas", "replicas", _set("Deployment.spec", "replicas", "1")),
    ("pm unknown field", "podmonitoring", "endpoint", _set("PodMonitoring.spec", "endpoint", [])),
    ("pm no interval", "podmonitoring", "interval", _del(_EP, "interval")),
    ("pm bad duration", "podmonitoring", "duration", _set(_EP, "interval", "1 minute")),
    ("pm timeout", "podmonitoring", "timeout", _set(_EP, "timeout", "2m")),
    (
        "pm version",
        "podmonitoring",
        "apiVersion",
        _set("PodMonitoring", "apiVersion", "monitoring.googleapis.com/v1alpha1"),
    ),
    ("config host", "config", "http.host", _config('host = "0.0.0.0"', 'host = "127.0.0.1"')),
    ("config no slack", "config", "slack.channel", _config('channel = "#gpu-costs"\n', "")),
    ("root", "security", "runAsUser", _set("pod.securityContext", "runAsUser", 0)),
    ("other uid", "security", "runAsUser", _set("pod.securityContext", "runAsUser", 1000)),
    (
        "writable root",
        "security",
        "readOnlyRootFilesystem",
        _set("container.securityContext", "readOnlyRootFilesystem", False),
    ),
    (
        "escalation",
        "security",
        "allowPrivilegeEscalation",
        _del("container.securityContext", "allowPrivilegeEscalation"),
    ),
    (
        "caps",
        "security",
        "capabilities",
        _set("container.securityContext.capabilities", "add", ["NET_ADMIN"]),
    ),
    ("seccomp", "security", "seccompProfile", _del("pod.securityContext", "seccompProfile")),
    ("no /tmp volume", "paths", "TMPDIR", _mount("/tmp", None)),
    ("state read-only", "paths", "state.url", _mount("/var/lib/gpucost", True)),
    ("MPLCONFIGDIR off", "paths", "MPLCONFIGDIR", _env("MPLCONFIGDIR", "/opt/mpl")),
    (
        "digest elsewhere",
        "paths",
        "digest.out_dir",
        _config('out_dir = "/var/lib/gpucost/digests"', 'out_dir = "/srv/d"'),
    ),
    ("token literal", "token", "secretKeyRef", _env("SLACK_BOT_TOKEN", "xoxb-1")),
    ("token optional", "token", "optional", _set(_TOKEN_REF, "optional", True)),
    ("secret object", "token", "Secret", lambda objs: objs.append(copy.deepcopy(_SECRET))),
    ("token in config", "token", "holds a Slack token", _set("ConfigMap.data", "extra", "xoxb-123")),
    ("liveness path", "ports", "livenessProbe", _set("container.livenessProbe.httpGet", "path", "/readyz")),
    ("readiness port", "ports", "readinessProbe", _set("container.readinessProbe.httpGet", "port", 8080)),
    ("config port", "ports", "9465", _config("port = 9464", "port = 9465")),
    ("scrape port", "ports", "PodMonitoring scrapes", _set(_EP, "port", "metrics")),
    ("selector", "ports", "selector", _set("PodMonitoring.spec.selector", "matchLabels", {"app": "x"})),
    (
        "annotation",
        "identity",
        WI_ANNOTATION,
        lambda objs: _node(objs, "ServiceAccount.metadata.annotations").clear(),
    ),
    ("two replicas", "identity", "Recreate", _set("Deployment.spec", "replicas", 2)),
    ("rolling", "identity", "Recreate", _set("Deployment.spec", "strategy", {"type": "RollingUpdate"})),
    ("no limits", "resources", "limits", _del("container.resources", "limits")),
    (
        "image placeholder",
        "resources",
        "image",
        _set("container", "image", "REGION-docker.pkg.dev/MY_PROJECT/g/g:1"),
    ),
    (
        "image untagged",
        "resources",
        "image",
        _set("container", "image", "us-docker.pkg.dev/my-project/gpucost/gpucost"),
    ),
]


def _run_check(name: str, objs: list[Obj], image: dict[str, Any], tmp: Path) -> list[str]:
    if name == "schemas":
        return check_builtin_schemas(objs)
    if name == "podmonitoring":
        return check_podmonitoring(objs)
    if name == "resources":
        return check_image_and_resources(objs)
    cfg = load_mounted_config(objs, tmp)
    return {
        "config": lambda: check_production_config(cfg),
        "security": lambda: check_security(objs, image),
        "paths": lambda: check_writable_paths(objs, cfg, image),
        "token": lambda: check_slack_token(objs, cfg),
        "ports": lambda: check_ports_and_probes(objs, cfg, image),
        "identity": lambda: check_identity_and_state(objs, cfg),
    }[name]()


@pytest.mark.parametrize(("brk", "check", "fragment", "edit"), BREAKS, ids=[b[0] for b in BREAKS])
def test_checks_catch_a_broken_base(
    brk: str,
    check: str,
    fragment: str,
    edit: Edit,
    rendered: list[Obj],
    image: dict[str, Any],
    tmp_path: Path,
) -> None:
    assert _run_check(check, rendered, image, tmp_path) == []  # intact, the check passes
    broken = copy.deepcopy(rendered)
    edit(broken)
    problems = _run_check(check, broken, image, tmp_path)
    assert any(fragment in p for p in problems), f"{check} missed the break {brk!r}: {problems}"


def test_config_model_rejects_a_broken_configmap(rendered: list[Obj], tmp_path: Path) -> None:
    """The ConfigMap goes through the strict model: a typo is an error, as at `gpucost run`."""
    broken = copy.deepcopy(rendered)
    _config("retention_days = 90", "retention_dayz = 90")(broken)
    from monitor.errors import ConfigError

    with pytest.raises(ConfigError, match=r"state\.retention_dayz: unknown key"):
        load_mounted_config(broken, tmp_path)


def test_dockerfile_image_user_and_workdir(image: dict[str, Any]) -> None:
    """The facts the checks rely on, read from deploy/Dockerfile's final stage."""
    assert numeric_user(image["user"]) == 10001
    assert image["workdir"] == "/var/lib/gpucost"
    assert image["env"]["MPLCONFIGDIR"].startswith("/tmp/")
    assert image["expose"] == [9464]
