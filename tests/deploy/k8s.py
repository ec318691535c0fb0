"""Reading the manifests in deploy/kubernetes: documents, kustomizations, and the box's parts.

Pure helpers over parsed YAML, shared by the manifest tests; nothing here talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
#: The Kubernetes version the manifests are validated against (and the oldest they need:
#: native sidecars and the preStop sleep action are on by default from 1.30).
KUBERNETES_VERSION = "1.30"
KUSTOMIZATION = "kustomization.yaml"

Doc = dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object and the file it came from."""

    path: Path
    doc: Doc

    @property
    def kind(self) -> str:
        """The object's kind."""
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        """metadata.name."""
        return str(self.doc["metadata"]["name"])

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}: {self.kind}/{self.doc.get('metadata', {}).get('name')}"


def manifest_files(root: Path = K8S) -> list[Path]:
    """Every YAML file under ``root`` that is not a kustomization."""
    return sorted(p for p in root.rglob("*.yaml") if p.name != KUSTOMIZATION)


def load_manifests(root: Path = K8S) -> list[Manifest]:
    """Every object in every manifest file under ``root``, in file order."""
    found = []
    for path in manifest_files(root):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                found.append(Manifest(path, doc))
    return found


def kustomizations(root: Path = K8S) -> list[Path]:
    """Every kustomization.yaml under ``root``."""
    return sorted(root.rglob(KUSTOMIZATION))


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The single object of ``kind`` (and ``name``); fails the test if there is not exactly one."""
    hits = [m for m in manifests if m.kind == kind and (name is None or m.name == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {[str(m) for m in hits]}"
    return hits[0]


def pod_spec(workload: Manifest) -> Doc:
    """The pod template's spec of a Deployment, DaemonSet or StatefulSet."""
    spec: Doc = workload.doc["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: Manifest) -> dict[str, str]:
    """The pod template's labels."""
    labels: dict[str, str] = workload.doc["spec"]["template"]["metadata"]["labels"]
    return labels


def all_containers(spec: Doc) -> Iterator[Doc]:
    """Init containers (sidecars included), then the regular ones."""
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(spec: Doc, name: str) -> Doc:
    """The container (init or regular) called ``name``."""
    for item in all_containers(spec):
        if item["name"] == name:
            return item
    raise AssertionError(f"no container {name!r} in the pod; have {[c['name'] for c in all_containers(spec)]}")


def container_port(item: Doc, port: int | str) -> int:
    """A probe's or Service's port as a number: a named port resolved against the container's."""
    if isinstance(port, int):
        return port
    for declared in item.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise AssertionError(f"container {item['name']!r} declares no port named {port!r}")


def mount_path(spec: Doc, item: Doc, volume_kind: str) -> dict[str, str]:
    """Volume name -> where ``item`` mounts it, for the pod's volumes of ``volume_kind`` (emptyDir...)."""
    kinds = {v["name"] for v in spec.get("volumes", []) if volume_kind in v}
    return {m["name"]: m["mountPath"] for m in item.get("volumeMounts", []) if m["name"] in kinds}


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """An equality selector (every key=value present) matches ``labels``; an empty one matches nothing."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def flag_values(args: list[str], flag: str) -> list[str]:
    """The values of ``--flag`` in a command line, whether written ``--flag=v`` or ``--flag v [v...]``.

    Space-separated values run until the next argument starting with ``-``.
    """
    values: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            values.append(arg.split("=", 1)[1])
        elif arg == flag:
            for following in args[i + 1 :]:
                if following.startswith("-"):
                    break
                values.append(following)
    return values


def flag_value(args: list[str], flag: str) -> str:
    """The one value of ``flag``; fails the test when it is missing or given twice."""
    values = flag_values(args, flag)
    assert len(values) == 1, f"expected one value of {flag} in {args}, got {values}"
    return values[0]


def quantity_cpus(value: str | int | float) -> float:
    """A CPU quantity ("2", 2, "500m") in CPUs."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
