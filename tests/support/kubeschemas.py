"""JSON Schemas for kubeconform, derived offline from a live kube-apiserver's ``/openapi/v2``.

No registry or GitHub is reachable here, so the published kubernetes-json-schema files are
out of reach; they are themselves generated from the apiserver's OpenAPI document. This does
the same from our own v1.36.3 build (hack/control-plane-build.sh), which also serves every
installed CRD's schema (GPUTelemetry, ServiceMonitor), so the rendered chart is checked
against exactly the API it installs into. As openapi2jsonschema does:

- one file per kind, named as kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}.json``
  template expects (``deployment-apps-v1.json``, ``service-v1.json``), holding a ``$ref`` to the
  kind's definition and every definition it reaches (so recursive ones, such as a CRD's
  JSONSchemaProps, stay references);
- ``int-or-string`` and ``Quantity`` accept a string or a number, as the apiserver does;
- strict: an object schema that lists its properties allows no others (kubeconform's
  ``-strict`` schemas), unless it preserves unknown fields.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
STRING_OR_NUMBER = {"oneOf": [{"type": "string"}, {"type": "number"}]}
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
#: kubeconform's -schema-location template for the files written here.
LOCATION = "{{ .ResourceKind }}{{ .KindSuffix }}.json"


def kind_file(api_version: str, kind: str) -> str:
    """The file name kubeconform looks up for ``api_version``/``kind``."""
    group_version = api_version.split("/")
    suffix = "-" + group_version[0].split(".")[0].lower()
    if len(group_version) > 1:
        suffix += "-" + group_version[1].lower()
    return f"{kind.lower()}{suffix}.json"


def _strict(node: Any) -> Any:
    """A schema node with int-or-string widened and, where it lists properties, no others."""
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        return {**{k: v for k, v in node.items() if k not in ("type", "format")},
                **INT_OR_STRING}
    out = dict(node)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if ("additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(s) for s in out[key]]
    return out


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            yield ref.removeprefix("#/definitions/")
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def write_schemas(openapi: dict[str, Any], out: Path,
                  kinds: Iterable[tuple[str, str]]) -> list[Path]:
    """Write the schema file of each (apiVersion, kind) into ``out``; a kind the document
    does not define is a :class:`KeyError` (kubeconform would skip it silently otherwise)."""
    defs = copy.deepcopy(openapi["definitions"])
    fixed = {name: _strict(d) for name, d in defs.items()}
    if QUANTITY in fixed:
        fixed[QUANTITY] = {**STRING_OR_NUMBER, "description": "Quantity"}
    by_gvk: dict[tuple[str, str], str] = {}
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            by_gvk[(api_version, gvk["kind"])] = name
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for api_version, kind in sorted(set(kinds)):
        name = by_gvk.get((api_version, kind))
        if name is None:
            raise KeyError(f"the apiserver's OpenAPI has no {api_version} {kind}")
        closure, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in closure:
                closure.add(n)
                todo.extend(_refs(fixed[n]))
        schema = {"$ref": f"#/definitions/{name}",
                  "definitions": {n: fixed[n] for n in sorted(closure)}}
        path = out / kind_file(api_version, kind)
        path.write_text(json.dumps(schema))
        written.append(path)
    return written
