"""The Kubernetes manifests of a syshax box (deploy/kubernetes), checked offline.

Every object is validated against the Kubernetes 1.30 OpenAPI schemas bundled with
kubernetes-validate, in strict mode (an unknown or misspelt field is an error). The two custom
resources are not in those schemas: the InferencePool is validated against its v1.0.1 CRD's
schema (tests/deploy/schemas), the HTTPRoute's required fields are checked explicitly in
test_routers.py. Then the facts that would break a real box while still being valid YAML:
the probes, the config, the socket, the engines' ports, QoS and the drain's timing.
"""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import psutil
import pytest
import yaml

from syshaxd.config import Config, ConfigError, load_config
from syshaxd.locate import CONFIG_LOCATIONS
from tests.deploy.k8s import (
    K8S,
    KUBERNETES_VERSION,
    ROOT,
    Doc,
    Manifest,
    all_containers,
    container,
    container_port,
    flag_value,
    kustomizations,
    load_manifests,
    manifest_files,
    mount_path,
    one,
    pod_spec,
    quantity_cpus,
)

MANIFESTS = load_manifests()
#: Kinds that are custom resources, not in the Kubernetes schemas (checked in test_routers.py).
CUSTOM = {"InferencePool", "HTTPRoute"}
FLEET_DOC = ROOT / "docs" / "fleet.md"


@functools.cache
def box() -> Manifest:
    """The DaemonSet of syshax boxes."""
    return one(MANIFESTS, "DaemonSet", "syshax")


@functools.cache
def config_text() -> str:
    """The syshax config as the ConfigMap carries it."""
    return str(one(MANIFESTS, "ConfigMap", "syshax-config").doc["data"]["config.yaml"])


def load_box_config(tmp_path: Path) -> Config:
    """The ConfigMap's config, loaded by the daemon's own loader (defaults, file; no environment)."""
    path = tmp_path / "config.yaml"
    path.write_text(config_text(), encoding="utf-8")
    return load_config(path, env={}, use_overrides=False).config


@functools.cache
def box_config() -> Config:
    """The ConfigMap's config, parsed once (without the loader's file checks: see the test that runs them)."""
    return Config.model_validate(yaml.safe_load(config_text()))


def args_of(item: Doc) -> list[str]:
    """A container's command line after the executable: command[1:] + args."""
    return [str(a) for a in [*item.get("command", [])[1:], *item.get("args", [])]]


# ---------------------------------------------------------------------------------------
# Schemas and kustomizations


def listed_objects(kustomization: Path) -> list[Doc]:
    """The objects of the files a kustomization lists."""
    resources = yaml.safe_load(kustomization.read_text(encoding="utf-8"))["resources"]
    return [doc for resource in resources
            for doc in yaml.safe_load_all((kustomization.parent / resource).read_text(encoding="utf-8")) if doc]


@pytest.mark.parametrize("manifest", [m for m in MANIFESTS if m.kind not in CUSTOM], ids=str)
def test_every_object_validates_against_the_kubernetes_schema(manifest: Manifest) -> None:
    try:
        kubernetes_validate.validate(manifest.doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{manifest}: {exc.message} at {'.'.join(map(str, exc.path))}")


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    broken = yaml.safe_load(yaml.safe_dump(box().doc))
    probe = container(pod_spec(Manifest(box().path, broken)), "syshaxd")
    probe["readinesProbe"] = probe.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_manifest_file_is_in_exactly_one_kustomization_and_every_listed_file_exists() -> None:
    listed: dict[Path, Path] = {}
    for kustomization in kustomizations():
        for resource in yaml.safe_load(kustomization.read_text(encoding="utf-8"))["resources"]:
            path = (kustomization.parent / resource).resolve()
            assert path.is_file(), f"{kustomization}: {resource} does not exist"
            assert path not in listed, f"{resource} is in {listed[path]} and {kustomization}"
            listed[path] = kustomization
    assert set(listed) == set(manifest_files()), "files in no kustomization: " + ", ".join(
        str(p) for p in set(manifest_files()) - set(listed))


def test_every_object_sits_in_its_kustomizations_namespace() -> None:
    for kustomization in kustomizations():
        namespace = yaml.safe_load(kustomization.read_text(encoding="utf-8"))["namespace"]
        for doc in listed_objects(kustomization):
            if doc["kind"] != "Namespace":
                assert doc["metadata"].get("namespace") == namespace, f"{kustomization}: {doc['kind']}"
    assert one(MANIFESTS, "Namespace").name == box().doc["metadata"]["namespace"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
@pytest.mark.parametrize("kustomization", kustomizations(), ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_kubectl_kustomize_builds_every_kustomization(kustomization: Path) -> None:
    built = subprocess.run(["kubectl", "kustomize", str(kustomization.parent)], capture_output=True, text=True,
                           timeout=60, check=False)
    assert built.returncode == 0, built.stderr
    names = sorted((d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(built.stdout))
    assert names == sorted((d["kind"], d["metadata"]["name"]) for d in listed_objects(kustomization))


# ---------------------------------------------------------------------------------------
# The config


def test_the_configmaps_config_loads_with_the_daemons_loader(tmp_path: Path) -> None:
    config = load_box_config(tmp_path)
    assert config.services.conductor.port == box_config().services.conductor.port


def test_the_loader_check_would_catch_an_unknown_key(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(config_text().replace("shutdown_grace:", "shutdown_grace_s:"))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(tmp_path / "config.yaml", env={}, use_overrides=False)


def test_syshaxd_reads_the_configmap_where_the_console_finds_it_too() -> None:
    spec = pod_spec(box())
    daemon = container(spec, "syshaxd")
    config_path = Path(flag_value(args_of(daemon), "--config"))
    assert config_path in CONFIG_LOCATIONS, "the console and `syshax` look only in the default locations"
    volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "syshax-config")
    for name in ("syshaxd", "console"):
        mounts = {m["name"]: m["mountPath"] for m in container(spec, name).get("volumeMounts", [])}
        assert Path(mounts[volume["name"]]) / "config.yaml" == config_path, name


def test_the_api_listens_on_every_interface_of_the_pod() -> None:
    # 127.0.0.1 would pass the config check and fail every probe, Service and router.
    assert box_config().services.conductor.host == "0.0.0.0"


# ---------------------------------------------------------------------------------------
# Probes, socket, engines


def test_readiness_is_health_on_the_port_syshaxd_listens_on() -> None:
    daemon = container(pod_spec(box()), "syshaxd")
    probe = daemon["readinessProbe"]["httpGet"]
    assert probe["path"] == "/health"
    assert container_port(daemon, probe["port"]) == box_config().services.conductor.port


def test_liveness_asks_the_api_port_but_not_health() -> None:
    # /health is 503 while the engines load and during a drain: a restart would help neither.
    daemon = container(pod_spec(box()), "syshaxd")
    probe = daemon["livenessProbe"]["httpGet"]
    assert probe["path"] != "/health"
    assert container_port(daemon, probe["port"]) == box_config().services.conductor.port


def test_the_service_targets_the_api_port_of_the_box_pods() -> None:
    service = one(MANIFESTS, "Service", "syshax").doc["spec"]
    assert service["selector"].items() <= box().doc["spec"]["template"]["metadata"]["labels"].items()
    daemon = container(pod_spec(box()), "syshaxd")
    assert [container_port(daemon, p["targetPort"]) for p in service["ports"]] == [box_config().services.conductor.port]


def console_container_in_docs() -> str:
    """The container docs/fleet.md tells operators to run ``syshax-console`` in."""
    for line in FLEET_DOC.read_text(encoding="utf-8").splitlines():
        if "kubectl exec" in line and "syshax-console" in line:
            return flag_value(line.split("--")[0].split(), "-c")
    raise AssertionError("docs/fleet.md shows no `kubectl exec ... -- syshax-console`")


def test_the_control_socket_is_on_a_shared_volume_in_syshaxd_and_the_console_container() -> None:
    spec = pod_spec(box())
    socket_dir = str(Path(str(box_config().control.socket)).parent)
    daemon = mount_path(spec, container(spec, "syshaxd"), "emptyDir")
    console = mount_path(spec, container(spec, console_container_in_docs()), "emptyDir")
    shared = [name for name, path in daemon.items() if path == socket_dir]
    assert shared, f"syshaxd mounts no emptyDir at {socket_dir}"
    assert console.get(shared[0]) == socket_dir, "the console's container does not see the socket"


def test_the_console_and_daemon_run_as_one_user_so_the_socket_lets_the_console_in() -> None:
    spec = pod_spec(box())
    users = {(c["securityContext"]["runAsUser"], c["securityContext"]["runAsGroup"])
             for c in (container(spec, "syshaxd"), container(spec, console_container_in_docs()))}
    assert len(users) == 1


def test_the_engines_listen_where_the_config_looks_for_them_and_serve_its_model() -> None:
    spec, config = pod_spec(box()), box_config()
    vllm, llama = args_of(container(spec, "gpu-engine")), args_of(container(spec, "cpu-engine"))
    assert (flag_value(vllm, "--host"), int(flag_value(vllm, "--port"))) == (config.services.gpu.host,
                                                                             config.services.gpu.port)
    assert (flag_value(llama, "--host"), int(flag_value(llama, "--port"))) == (config.services.cpu.host,
                                                                               config.services.cpu.port)
    assert flag_value(vllm, "--served-model-name") == flag_value(llama, "--alias") == config.models.default
    assert (config.services.gpu.dialect, config.services.cpu.dialect) == ("vllm-v1", "llamacpp")


def test_llama_server_runs_as_many_slots_as_the_cpu_limit_and_one_thread_per_pinned_core() -> None:
    llama = container(pod_spec(box()), "cpu-engine")
    assert int(flag_value(args_of(llama), "-np")) == box_config().decider.cpu_max_batch_size
    cpus = llama["resources"]["requests"]["cpu"]
    assert int(flag_value(args_of(llama), "--threads")) == quantity_cpus(cpus)


def test_the_pod_is_guaranteed_and_the_cpu_engine_gets_whole_cores() -> None:
    # The static CPU manager pins cores only for integer CPUs in a Guaranteed pod.
    spec = pod_spec(box())
    for item in all_containers(spec):
        requests, limits = item["resources"]["requests"], item["resources"]["limits"]
        for resource in ("cpu", "memory"):
            assert str(requests[resource]) == str(limits[resource]), f"{item['name']}: {resource}"
    assert quantity_cpus(container(spec, "cpu-engine")["resources"]["limits"]["cpu"]).is_integer()
    assert container(spec, "gpu-engine")["resources"]["limits"]["nvidia.com/gpu"] >= 1


def test_the_engines_outlive_syshaxd_so_a_drain_has_engines_to_finish_on() -> None:
    spec = pod_spec(box())
    sidecars = {c["name"] for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"}
    assert {"gpu-engine", "cpu-engine"} <= sidecars


def test_the_grace_period_covers_the_prestop_wait_and_the_drain() -> None:
    spec = pod_spec(box())
    pre_stop: Any = container(spec, "syshaxd").get("lifecycle", {}).get("preStop", {})
    wait = pre_stop.get("sleep", {}).get("seconds", 0)
    # What is left after the drain is the engines' time to stop: at least 10 s.
    assert spec["terminationGracePeriodSeconds"] >= wait + box_config().system.shutdown_grace + 10


def test_the_box_runs_on_gpu_nodes_only() -> None:
    spec = pod_spec(box())
    assert any(key.startswith("nvidia.com/gpu") for key in spec["nodeSelector"])
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"]), "GPU nodes are usually tainted"


def test_the_dockerfile_copies_only_what_exists() -> None:
    for line in (K8S / "Dockerfile").read_text(encoding="utf-8").splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


def _handles_sigterm(pid: int) -> bool:
    """Whether the process catches, blocks or waits for SIGTERM (/proc/PID): as PID 1 it is
    otherwise ignored, and a signal sent before the command set that up would be lost.
    (Inside sigwait() the kernel shows the awaited signals unblocked: it waits in
    do_sigtimedwait then.)"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if line.startswith(("SigBlk", "SigCgt")))
    bit = 1 << (signal.SIGTERM - 1)
    return "sigtimedwait" in wchan or any(int(masks.get(key, "0"), 16) & bit for key in ("SigBlk", "SigCgt"))


def run_as_pid_1(argv: list[str]) -> subprocess.Popen[bytes]:
    """``argv`` as PID 1 of a new PID namespace, as a container runs its command (needs root);
    returned once it has set up its SIGTERM handling."""
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        children = psutil.Process(proc.pid).children()
        if children and _handles_sigterm(children[0].pid):
            return proc
        time.sleep(0.05)
    if proc.poll() is None:  # started, but never ready: do not leave it behind
        proc.kill()
    stderr = proc.communicate(timeout=5)[1].decode(errors="replace")
    pytest.skip(f"cannot start a process in a new PID namespace here: {stderr.strip()[:200]}")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare not installed")
def test_the_console_container_stops_on_sigterm_as_pid_1() -> None:
    # As PID 1 a process ignores SIGTERM unless it handles it; the pod would then wait the
    # whole terminationGracePeriodSeconds on every roll before the kubelet kills it.
    command = [sys.executable if arg == "python" else arg
               for arg in container(pod_spec(box()), console_container_in_docs())["command"]]
    proc = run_as_pid_1(command)
    try:
        (child,) = psutil.Process(proc.pid).children()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate(timeout=5)
