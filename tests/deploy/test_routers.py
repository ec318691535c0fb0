"""The two ways in front of a fleet of boxes: vllm-router 0.1.17 and an InferencePool (v1.0.1).

What a router needs to find the boxes: its selector matches the box pods' labels (and not its
own), it talks to the API port the ConfigMap sets, it watches the namespace the boxes are in
with the permissions to do so. The InferencePool is validated against the schema of the
v1.0.1 CRD (tests/deploy/schemas, with unknown fields rejected as kubernetes-validate's
strict mode does) plus the CRD's one CEL rule; the HTTPRoute (a Gateway API CRD, not
vendored here) has its required fields and its reference to the pool checked explicitly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.k8s import (
    Manifest,
    container,
    container_port,
    flag_value,
    flag_values,
    load_manifests,
    one,
    pod_labels,
    pod_spec,
    selects,
)
from tests.deploy.served import Served

MANIFESTS = load_manifests()
POOL_SCHEMA = Path(__file__).parent / "schemas" / "inferencepool-v1.0.1.json"
#: The router's flags that matter for finding and loading the boxes.
ROUTER_VERSION = "0.1.17"


def box() -> Manifest:
    """The DaemonSet of boxes."""
    return one(MANIFESTS, "DaemonSet", "syshax")


def api_port() -> int:
    """services.conductor.port of the ConfigMap's config."""
    config = yaml.safe_load(one(MANIFESTS, "ConfigMap", "syshax-config").doc["data"]["config.yaml"])
    return int(config["services"]["conductor"]["port"])


def router() -> Manifest:
    """The vllm-router Deployment."""
    return one(MANIFESTS, "Deployment", "syshax-router")


def router_args() -> list[str]:
    """The router container's arguments."""
    return [str(a) for a in container(pod_spec(router()), "router")["args"]]


def router_selector() -> dict[str, str]:
    """``--selector k=v [k=v ...]`` as a mapping."""
    return dict(item.split("=", 1) for item in flag_values(router_args(), "--selector"))


# ---------------------------------------------------------------------------------------
# vllm-router


def test_the_router_selects_the_box_pods_and_not_itself() -> None:
    assert selects(router_selector(), pod_labels(box()))
    assert not selects(router_selector(), pod_labels(router()))


def test_the_router_talks_to_the_api_port_in_the_boxes_namespace_with_power_of_two() -> None:
    args = router_args()
    assert "--service-discovery" in args
    assert int(flag_value(args, "--service-discovery-port")) == api_port()
    assert flag_value(args, "--service-discovery-namespace") == box().doc["metadata"]["namespace"]
    assert flag_value(args, "--policy") == "power_of_two"
    assert flag_value(args, "--health-check-endpoint") == "/health"


def test_the_router_may_list_and_watch_pods_in_that_namespace() -> None:
    namespace = box().doc["metadata"]["namespace"]
    account = pod_spec(router())["serviceAccountName"]
    one(MANIFESTS, "ServiceAccount", account)
    bindings = [m.doc for m in MANIFESTS if m.kind == "RoleBinding" and m.doc["metadata"]["namespace"] == namespace
                and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in m.doc["subjects"]]
    assert bindings, f"no RoleBinding in {namespace} for {account}"
    verbs: set[str] = set()
    for binding in bindings:
        role = one(MANIFESTS, binding["roleRef"]["kind"], binding["roleRef"]["name"]).doc
        verbs |= {verb for rule in role["rules"] if "" in rule["apiGroups"] and "pods" in rule["resources"]
                  for verb in rule["verbs"]}
    assert {"list", "watch"} <= verbs


def test_the_router_service_reaches_the_router_port() -> None:
    service = one(MANIFESTS, "Service", "syshax-router").doc["spec"]
    assert selects(service["selector"], pod_labels(router()))
    item = container(pod_spec(router()), "router")
    ports = {container_port(item, p["targetPort"]) for p in service["ports"]}
    assert int(flag_value(router_args(), "--port")) in ports
    assert flag_value(router_args(), "--host") == "0.0.0.0"


def test_the_router_arguments_parse_with_vllm_router_0_1_17() -> None:
    launcher = pytest.importorskip("vllm_router.launch_router", reason="vllm-router is not installed")
    from importlib.metadata import version

    if version("vllm-router") != ROUTER_VERSION:
        pytest.skip(f"vllm-router {version('vllm-router')} installed, the manifests are for {ROUTER_VERSION}")
    parsed: Any = launcher.parse_router_args(router_args())  # argparse: an unknown flag exits
    parsed._validate_router_args()
    assert parsed.service_discovery and parsed.selector == router_selector()
    assert (parsed.service_discovery_port, parsed.policy) == (api_port(), "power_of_two")


# ---------------------------------------------------------------------------------------
# InferencePool, endpoint picker, HTTPRoute


def pool() -> dict[str, Any]:
    """The InferencePool."""
    return one(MANIFESTS, "InferencePool", "syshax").doc


def strict(schema: Any) -> Any:
    """The schema with unknown properties rejected wherever properties are listed (as the API
    server prunes them: a misspelt optional field would be dropped without a word)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and out["properties"].keys() - {"metadata"}:
            out["additionalProperties"] = False
        return out
    return [strict(v) for v in schema] if isinstance(schema, list) else schema


def validate_pool(doc: dict[str, Any]) -> None:
    """Validate against the v1.0.1 CRD schema and its CEL rule on endpointPickerRef."""
    assert doc["apiVersion"] == "inference.networking.k8s.io/v1"
    jsonschema.Draft202012Validator(strict(json.loads(POOL_SCHEMA.read_text(encoding="utf-8")))).validate(doc)
    ref = doc["spec"]["endpointPickerRef"]
    # x-kubernetes-validations: self.kind != 'Service' || has(self.port)
    if ref.get("kind", "Service") == "Service" and "port" not in ref:
        raise jsonschema.ValidationError("endpointPickerRef: port is required when kind is 'Service'")


def test_the_inference_pool_validates_against_its_v1_0_1_crd_schema() -> None:
    validate_pool(pool())


@pytest.mark.parametrize("damage", ["targetPortNumber", "portNumber", "no_port"])
def test_the_pool_check_rejects_old_field_names_and_a_missing_picker_port(damage: str) -> None:
    broken = json.loads(json.dumps(pool()))
    spec = broken["spec"]
    if damage == "targetPortNumber":  # the v1alpha2 spelling
        spec["targetPortNumber"] = spec.pop("targetPorts")[0]["number"]
    elif damage == "portNumber":
        spec["endpointPickerRef"]["portNumber"] = spec["endpointPickerRef"].pop("port")["number"]
    else:
        spec["endpointPickerRef"].pop("port")
    with pytest.raises(jsonschema.ValidationError):
        validate_pool(broken)


def test_the_pool_selects_the_box_pods_on_the_api_port() -> None:
    spec = pool()["spec"]
    assert selects(spec["selector"]["matchLabels"], pod_labels(box()))
    assert pool()["metadata"]["namespace"] == box().doc["metadata"]["namespace"]
    assert [p["number"] for p in spec["targetPorts"]] == [api_port()]


def test_the_pool_names_its_endpoint_picker_and_the_picker_serves_that_pool() -> None:
    ref = pool()["spec"]["endpointPickerRef"]
    service = one(MANIFESTS, "Service", ref["name"]).doc["spec"]
    picker = one(MANIFESTS, "Deployment", "syshax-epp")
    assert selects(service["selector"], pod_labels(picker))
    assert not selects(pool()["spec"]["selector"]["matchLabels"], pod_labels(picker))
    epp = container(pod_spec(picker), "epp")
    exposed = {p["port"]: container_port(epp, p["targetPort"]) for p in service["ports"]}
    args = [str(a) for a in epp["args"]]
    assert exposed[ref["port"]["number"]] == int(flag_value(args, "--grpc-port"))
    assert flag_value(args, "--pool-name") == pool()["metadata"]["name"]
    assert flag_value(args, "--pool-namespace") == pool()["metadata"]["namespace"]


def test_the_picker_reads_the_vllm_gauge_names_the_box_serves() -> None:
    args = [str(a) for a in container(pod_spec(one(MANIFESTS, "Deployment", "syshax-epp")), "epp")["args"]]
    assert flag_value(args, "--total-queued-requests-metric") == "vllm:num_requests_waiting"
    # v1.0.1's default is vLLM's pre-0.10 name, vllm:gpu_cache_usage_perc.
    assert flag_value(args, "--kv-cache-usage-percentage-metric") == "vllm:kv_cache_usage_perc"
    assert "--lora-info-metric=" in args


def test_the_picker_reads_gauges_a_real_daemon_serves(served: Served) -> None:
    args = [str(a) for a in container(pod_spec(one(MANIFESTS, "Deployment", "syshax-epp")), "epp")["args"]]
    for flag in ("--total-queued-requests-metric", "--kv-cache-usage-percentage-metric"):
        name = flag_value(args, flag)
        assert served.samples.get(name, ("missing",))[0] == "gauge", f"{flag}: {name} is no gauge on /metrics"


def test_the_http_route_sends_every_path_to_the_pool() -> None:
    route = one(MANIFESTS, "HTTPRoute", "syshax").doc
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] and all(ref["name"] for ref in route["spec"]["parentRefs"])
    (rule,) = route["spec"]["rules"]
    assert [m["path"] for m in rule["matches"]] == [{"type": "PathPrefix", "value": "/"}]
    (backend,) = rule["backendRefs"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        "inference.networking.k8s.io", "InferencePool", pool()["metadata"]["name"])
