"""Our own samples of the forms the Dev Container specification's templates take when they use
Features, Docker Compose and runArgs (written for DevCell's tests, not copied): each a small
project (devcontainer.json and the files it names, every image FROM the test base image so
nothing needs the network), the DevCell configuration it needs (the allowances a team's
administrator would grant), and the Features it names, in the specification's format, for
the test to push to its local registry.

tests/e2e/test_devcontainer_samples.py imports and dry-runs each one; the owners' tests apply
the same forms for real.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE = "devcell/busybox:latest"


def feature(id_: str, *, options: dict[str, Any] | None = None, **metadata: Any
            ) -> dict[str, str]:
    """A Feature folder in the specification's format: devcontainer-feature.json (id,
    version, options, and any metadata given: containerEnv, privileged, mounts, ...) and an
    install.sh that records the options it was given (they arrive as upper-cased
    environment variables)."""
    names = [str(o).upper() for o in (options or {})]
    record = " ".join(f"{n}=${{{n}}}" for n in names) or "no-options"
    return {
        "devcontainer-feature.json": json.dumps(
            {"id": id_, "version": "1.0.0", "name": id_, "options": options or {},
             **metadata}, indent=2) + "\n",
        "install.sh": textwrap.dedent(f"""\
            #!/bin/sh
            set -e
            mkdir -p /usr/local/share/devcell-features
            echo "{record}" > /usr/local/share/devcell-features/{id_}
            """),
    }


def _opt(kind: str, default: Any) -> dict[str, Any]:
    return {"type": kind, "default": default}


@dataclass(frozen=True)
class Sample:
    name: str
    form: str
    """Which template form it stands for, in words."""
    files: dict[str, str]
    """Relative path in the project -> content (.devcontainer/devcontainer.json among them)."""
    security: dict[str, Any] = field(default_factory=dict)
    """The DevCell configuration's `security` allowances it needs."""
    features: dict[str, dict[str, str]] = field(default_factory=dict)
    """OCI reference (ghcr.io/...:tag) -> the Feature's files, pushed by the test."""
    expect: tuple[str, ...] = ()
    """Dotted paths of the manifest that must be there (`spec.sidecars`, `spec.features`)."""

    def lay_down(self, root: Path) -> Path:
        for rel, text in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if text.startswith("#!"):
                path.chmod(0o755)
        return root / ".devcontainer" / "devcontainer.json"


DC = ".devcontainer/devcontainer.json"

SAMPLES = [
    Sample(
        "image-features", "an image and Features from a registry, with options",
        {DC: textwrap.dedent(f"""\
            // An image plus Features: the most common form of the templates.
            {{
              "name": "Image with Features",
              "image": "{BASE}",
              "features": {{
                "ghcr.io/devcontainers/features/common-utils:2": {{
                  "installZsh": false,
                  "username": "devcell",
                }},
                "ghcr.io/devcontainers/features/node:1": {{"version": "lts"}},
                "ghcr.io/devcontainers/features/git:1": {{}},
              }},
              "forwardPorts": [3000],
              "postCreateCommand": "ls -1 ${{containerWorkspaceFolder}}",
            }}
            """),
         "README.md": "# a project\n"},
        features={
            "ghcr.io/devcontainers/features/common-utils:2": feature(
                "common-utils", options={"installZsh": _opt("boolean", True),
                                         "username": _opt("string", "automatic")}),
            "ghcr.io/devcontainers/features/node:1": feature(
                "node", options={"version": _opt("string", "lts")},
                containerEnv={"NVM_DIR": "/usr/local/share/nvm"},
                installsAfter=["ghcr.io/devcontainers/features/common-utils"]),
            "ghcr.io/devcontainers/features/git:1": feature(
                "git", options={"version": _opt("string", "os-provided")}),
        },
        expect=("spec.features", "spec.network.ports"),
    ),
    Sample(
        "dockerfile-local-feature", "a Dockerfile with build args, a local Feature beside "
        "devcontainer.json and a registry one, in an order of its own",
        {DC: textwrap.dedent("""\
            {
              "name": "Dockerfile and a local Feature",
              "build": {
                "dockerfile": "Dockerfile",
                "context": "..",
                "args": {"VARIANT": "stable"},
              },
              "features": {
                "./local-features/greeting": {"greeting": "hello"},
                "ghcr.io/devcontainers/features/github-cli:1": {},
              },
              "overrideFeatureInstallOrder": [
                "./local-features/greeting",
                "ghcr.io/devcontainers/features/github-cli",
              ],
              "containerEnv": {"PROJECT": "${localWorkspaceFolderBasename}"},
              "postCreateCommand": ["sh", "-c", "cat /usr/local/share/devcell-features/*"],
            }
            """),
         ".devcontainer/Dockerfile": f"ARG VARIANT=latest\nFROM {BASE}\nARG VARIANT\n"
                                     "RUN echo \"variant=$VARIANT\" > /etc/variant\n",
         **{f".devcontainer/local-features/greeting/{k}": v for k, v in feature(
             "greeting", options={"greeting": _opt("string", "hi")}).items()},
         "README.md": "# a project\n"},
        features={"ghcr.io/devcontainers/features/github-cli:1": feature(
            "github-cli", options={"version": _opt("string", "latest")})},
        expect=("spec.build", "spec.features"),
    ),
    Sample(
        "docker-in-docker", "a Feature whose metadata asks for a privileged container, a "
        "volume and an entrypoint (allowed by the configuration)",
        {DC: textwrap.dedent(f"""\
            {{
              "name": "Docker in Docker",
              "image": "{BASE}",
              "features": {{
                "ghcr.io/devcontainers/features/docker-in-docker:2": {{
                  "version": "latest",
                  "moby": true,
                }},
              }},
              "remoteEnv": {{"LOCAL_WORKSPACE_FOLDER": "${{localWorkspaceFolder}}"}},
            }}
            """)},
        security={"allowPrivileged": True},
        features={"ghcr.io/devcontainers/features/docker-in-docker:2": feature(
            "docker-in-docker",
            options={"version": _opt("string", "latest"), "moby": _opt("boolean", True)},
            privileged=True, init=True, entrypoint="/usr/local/share/docker-init.sh",
            containerEnv={"DOCKER_BUILDKIT": "1"},
            mounts=[{"source": "dind-var-lib-docker-${devcontainerId}",
                     "target": "/var/lib/docker", "type": "volume"}])},
        expect=("spec.features",),
    ),
    Sample(
        "compose-database", "Docker Compose: the app built from a Dockerfile and a database "
        "beside it, sharing its network",
        {DC: textwrap.dedent("""\
            {
              "name": "App and database",
              "dockerComposeFile": "docker-compose.yml",
              "service": "app",
              "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
              "forwardPorts": [5432],
              "postCreateCommand": "ls -1 /workspaces/${localWorkspaceFolderBasename}",
              "shutdownAction": "stopCompose",
            }
            """),
         ".devcontainer/Dockerfile": f"FROM {BASE}\nRUN echo app > /etc/app-image\n",
         ".devcontainer/db.Dockerfile": f"FROM {BASE}\nRUN mkdir -p /var/lib/db\n",
         ".devcontainer/docker-compose.yml": textwrap.dedent("""\
            services:
              app:
                build:
                  context: .
                  dockerfile: Dockerfile
                volumes:
                  - ../..:/workspaces:cached
                command: sleep infinity
                network_mode: service:db
                environment:
                  DB_HOST: localhost
              db:
                build:
                  context: .
                  dockerfile: db.Dockerfile
                restart: unless-stopped
                command: ["sh", "-c", "while true; do date >> /var/lib/db/log; sleep 1; done"]
                volumes:
                  - db-data:/var/lib/db
                environment:
                  DB_USER: app
            volumes:
              db-data:
            """),
         "README.md": "# a project\n"},
        expect=("spec.sidecars",),
    ),
    Sample(
        "compose-existing", "Docker Compose: the project's own compose file extended by one "
        "beside devcontainer.json, some services run and one not",
        {DC: textwrap.dedent("""\
            {
              "name": "Existing compose",
              "dockerComposeFile": ["../docker-compose.yml", "docker-compose.extend.yml"],
              "service": "web",
              "runServices": ["web", "cache"],
              "workspaceFolder": "/workspace",
              "overrideCommand": true,
              "shutdownAction": "none",
            }
            """),
         "docker-compose.yml": textwrap.dedent(f"""\
            services:
              web:
                image: {BASE}
                command: httpd -f -p 8080
                ports:
                  - "8080:8080"
              cache:
                image: {BASE}
                command: ["sh", "-c", "sleep infinity"]
              worker:
                image: {BASE}
                command: ["sh", "-c", "sleep infinity"]
            """),
         ".devcontainer/docker-compose.extend.yml": textwrap.dedent("""\
            services:
              web:
                volumes:
                  - ..:/workspace:cached
                command: /bin/sh -c "while sleep 1000; do :; done"
            """),
         "README.md": "# a project\n"},
        expect=("spec.sidecars",),
    ),
    Sample(
        "runargs-debugger", "runArgs of the C++/Go/Rust templates: ptrace and no seccomp for "
        "a debugger (allowed by the configuration)",
        {DC: textwrap.dedent("""\
            {
              "name": "Debugger",
              "build": {"dockerfile": "Dockerfile"},
              "runArgs": ["--cap-add=SYS_PTRACE", "--security-opt", "seccomp=unconfined"],
              "postCreateCommand": "true",
            }
            """),
         ".devcontainer/Dockerfile": f"FROM {BASE}\n",
         "README.md": "# a project\n"},
        security={"allowedCapabilities": ["SYS_PTRACE"],
                  "allowedSecurityOpts": ["seccomp=unconfined"]},
        expect=("spec.security",),
    ),
    Sample(
        "runargs-init-device", "runArgs with an init process, a device and the capability it "
        "needs (allowed by the configuration), and the same asked as fields",
        {DC: textwrap.dedent(f"""\
            {{
              "name": "Fuse",
              "image": "{BASE}",
              "runArgs": ["--init", "--device=/dev/fuse", "--cap-add", "SYS_ADMIN"],
              "init": true,
              "capAdd": ["SYS_ADMIN"],
            }}
            """)},
        security={"allowedCapabilities": ["SYS_ADMIN"], "allowedDevices": ["/dev/fuse"]},
        expect=("spec.security",),
    ),
    Sample(
        "mounts-and-variables", "mounts (a named cache volume, a bind of a folder of the "
        "developer's home), the specification's variables, host requirements",
        {DC: textwrap.dedent(f"""\
            {{
              "name": "Mounts and variables",
              "image": "{BASE}",
              "mounts": [
                "source=${{localWorkspaceFolderBasename}}-cache-${{devcontainerId}},target=/root/.cache,type=volume",
                {{"source": "${{localEnv:HOME}}/.kube", "target": "/root/.kube", "type": "bind"}},
              ],
              "containerEnv": {{"TZ": "${{localEnv:DEVCELL_SAMPLE_TZ:Europe/Paris}}"}},
              "remoteEnv": {{
                "PATH": "${{containerEnv:PATH}}:/opt/tools/bin",
                "EDITOR_FOLDER": "${{containerWorkspaceFolder}}",
              }},
              "hostRequirements": {{"cpus": 2, "memory": "4gb"}},
            }}
            """),
         "README.md": "# a project\n"},
        expect=("spec.volumes", "spec.mounts", "spec.resources"),
    ),
]
