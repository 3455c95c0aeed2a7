"""A minimal Kubernetes API server on 127.0.0.1 for running real ``kubectl`` commands in tests.

It serves discovery for the resources the Kubernetes export touches (pods, nodes, PyTorchJob,
Volcano Job and Command, DLRover ElasticJob and ScalePlan), answers every read and write with
the object named in the URL, and records each write (method, decoded path, content type, body). Nothing is
stored: it shows what kubectl sends, i.e. how kubectl parsed the command line. It serves no OpenAPI
documents, so ``kubectl create`` (which validates against them) is not run against it.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: group/version -> [(plural, kind, namespaced)]
RESOURCES = {
    "v1": [("pods", "Pod", True), ("nodes", "Node", False)],
    "kubeflow.org/v1": [("pytorchjobs", "PyTorchJob", True)],
    "batch.volcano.sh/v1alpha1": [("jobs", "Job", True)],
    "bus.volcano.sh/v1alpha1": [("commands", "Command", True)],
    "elastic.iml.github.io/v1alpha1": [("elasticjobs", "ElasticJob", True), ("scaleplans", "ScalePlan", True)],
}
VERBS = ["create", "delete", "get", "list", "patch"]


def _resource_list(gv: str) -> dict:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
        {"name": plural, "singularName": kind.lower(), "namespaced": ns, "kind": kind, "verbs": VERBS}
        for plural, kind, ns in RESOURCES[gv]]}


def _group_list() -> dict:
    groups = []
    for gv in RESOURCES:
        if "/" in gv:
            group, version = gv.split("/")
            ref = {"groupVersion": gv, "version": version}
            groups.append({"name": group, "versions": [ref], "preferredVersion": ref})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-apiserver"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        path = urlsplit(self.path).path
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return self._send(200, _group_list())
        gv = path[len("/api/"):] if path.startswith("/api/") else path[len("/apis/"):]
        if gv in RESOURCES:
            return self._send(200, _resource_list(gv))
        if path.startswith("/openapi") or path.startswith("/version"):
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                    "reason": "NotFound", "message": "not found"})
        if self.command != "GET":
            self.server.requests.append({"method": self.command, "path": [unquote(p) for p in path.split("/")[1:]],
                                         "content_type": self.headers.get("Content-Type"), "body": body})
        parts = path.split("/")
        name = unquote(parts[-1]) if self.command != "POST" else json.loads(body)["metadata"]["name"]
        kind = next((k for res in RESOURCES.values() for plural, k, _ in res
                     if plural in parts[-2:]), "Pod")
        api = "/".join(parts[2:4]) if parts[1] == "apis" else "v1"
        return self._send(201 if self.command == "POST" else 200,
                          {"apiVersion": api, "kind": kind, "metadata": {"name": name}})

    do_GET = do_DELETE = do_PATCH = do_POST = do_PUT = _any


@contextmanager
def fake_apiserver(home: Path):
    """(kubeconfig path, request list) of a server running for the block; ``home`` holds the kubeconfig."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = home / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "users": [{"name": "fake", "user": {}}]}))
    try:
        yield config, server.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
