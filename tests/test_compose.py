"""docker-compose.yml cannot run here (no Docker engine): check what it runs and what it refers to.

Every stage service's command parses with the real CLI parser; every ``STREAMS_*`` variable set in
the file or the Dockerfile names a real setting and holds a value that setting accepts; published
ports bind 127.0.0.1 only; images are pinned; Prometheus scrapes exactly the stages' metrics ports;
the files mounted into Prometheus and Grafana exist; the one-shot topic service creates the shared
topics the stages would create, with the same partition counts.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams import config
from streams.cli import _parser
from streams.stages.content_seen.stage import ContentSeenSettings
from streams.stages.revisit.stage import RevisitSettings
from streams.stages.url_dedup.settings import UrlDedupSettings
from streams.topics import Topics

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
# STREAMS_<SECTION>_<FIELD>: the section names config.load is called with, upper-cased.
SECTIONS: dict[str, type] = {
    "RUNTIME": config.RuntimeSettings,
    "TOPICS": config.TopicSettings,
    "METRICS": config.MetricsSettings,
    "URL_DEDUP": UrlDedupSettings,
    "CONTENT_SEEN": ContentSeenSettings,
    "REVISIT": RevisitSettings,
}
NOT_SETTINGS = {"STREAMS_CONFIG"}  # the TOML file's path
STAGES = {"url-dedup", "content-seen", "revisit"}


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def _stage_services() -> dict[str, Any]:
    return {name: spec for name, spec in _services().items() if spec.get("build")}


def _environment(spec: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict (compose also allows a list of NAME=value)."""
    environment = spec.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.partition("=")[::2] for item in environment)
    return {str(name): "" if value is None else str(value) for name, value in environment.items()}


def _dockerfile_environment() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ENV "):
            found.update(re.findall(r"(\w+)=(\S+)", line))
    return found


def setting_of(variable: str) -> tuple[str, type, str]:
    """(section, settings class, field) named by ``STREAMS_<SECTION>_<FIELD>``; the longest section wins."""
    rest = variable.removeprefix(config.ENV_PREFIX)
    for section in sorted(SECTIONS, key=len, reverse=True):
        if rest.startswith(f"{section}_"):
            return section, SECTIONS[section], rest[len(section) + 1:]
    raise AssertionError(f"{variable}: no settings section {sorted(SECTIONS)} matches")


def _streams_variables() -> list[tuple[str, str, str]]:
    """(where, variable, value) for every STREAMS_* variable the deployment sets."""
    found = [(name, variable, value) for name, spec in _services().items()
             for variable, value in _environment(spec).items() if variable.startswith(config.ENV_PREFIX)]
    found += [("Dockerfile", variable, value) for variable, value in _dockerfile_environment().items()
              if variable.startswith(config.ENV_PREFIX)]
    return found


def test_compose_has_the_three_stages() -> None:
    commands = {spec["command"][0] for spec in _stage_services().values()}
    assert commands == STAGES


def test_setting_of_prefers_the_longest_section() -> None:
    assert setting_of("STREAMS_URL_DEDUP_SEEN_SET") == ("URL_DEDUP", UrlDedupSettings, "SEEN_SET")
    assert setting_of("STREAMS_CONTENT_SEEN_MAX_BUCKET_ENTRIES")[2] == "MAX_BUCKET_ENTRIES"
    with pytest.raises(AssertionError):
        setting_of("STREAMS_URL_SEEN_SET")


@pytest.mark.parametrize("name", sorted(_stage_services()))
def test_stage_command_parses(name: str) -> None:
    command = _stage_services()[name]["command"]
    args = _parser().parse_args(command)
    assert args.handler is not None
    assert args.worker_id, "each worker needs a stable --worker-id"


def test_worker_ids_and_state_volumes_are_unique() -> None:
    stages = _stage_services()
    worker_ids = [_parser().parse_args(spec["command"]).worker_id for spec in stages.values()]
    assert len(set(worker_ids)) == len(worker_ids)
    state_dir = _dockerfile_environment()["STREAMS_RUNTIME_STATE_DIR"]
    volumes = []
    for name, spec in stages.items():
        mounted = [volume.partition(":")[0] for volume in spec["volumes"]
                   if volume.split(":")[1] == state_dir]
        assert len(mounted) == 1, f"{name}: one volume on {state_dir}"
        assert mounted[0] in _compose()["volumes"], f"{name}: {mounted[0]} is not a named volume"
        volumes.append(mounted[0])
    assert len(set(volumes)) == len(volumes)


@pytest.mark.parametrize(("where", "variable", "value"), _streams_variables())
def test_streams_variables_name_real_settings(where: str, variable: str, value: str) -> None:
    if variable in NOT_SETTINGS or variable.startswith(config.KAFKA_ENV_PREFIX):
        return  # STREAMS_KAFKA_* pass through to librdkafka
    section, cls, field = setting_of(variable)
    fields = {spec.name.upper() for spec in dataclasses.fields(cls)}
    assert field in fields, f"{where}: {variable} is not a setting of {cls.__name__}"
    # The value must be one the setting accepts (config.load raises ConfigError otherwise).
    config.load(cls, section.lower(), environ={variable: value})


@pytest.mark.parametrize("name", sorted(_stage_services()))
def test_stage_reaches_kafka_and_serves_metrics(name: str) -> None:
    spec = _stage_services()[name]
    environment = _environment(spec)
    assert environment[config.BOOTSTRAP_ENV] == "kafka:9092"
    metrics = config.load(config.MetricsSettings, "metrics", environ=environment)
    assert metrics.enabled and metrics.host == "0.0.0.0" and metrics.port > 0
    dependencies = spec["depends_on"]
    assert dependencies["kafka-topics"]["condition"] == "service_completed_successfully"
    assert "kafka" in dependencies


def _metrics_ports() -> dict[str, int]:
    return {name: int(_environment(spec)["STREAMS_METRICS_PORT"]) for name, spec in _stage_services().items()}


def test_metrics_ports_are_distinct_and_exposed() -> None:
    ports = _metrics_ports()
    assert len(set(ports.values())) == len(ports)
    exposed = {int(port) for line in DOCKERFILE.read_text().splitlines() if line.startswith("EXPOSE ")
               for port in line.split()[1:]}
    assert set(ports.values()) <= exposed


def test_prometheus_scrapes_every_stage() -> None:
    volumes = _services()["prometheus"]["volumes"]
    (source,) = [volume.split(":")[0] for volume in volumes
                 if volume.split(":")[1] == "/etc/prometheus/prometheus.yml"]
    scrape = yaml.safe_load((ROOT / source).read_text())
    targets = {target for job in scrape["scrape_configs"] for static in job.get("static_configs", [])
               for target in static["targets"]}
    assert targets == {f"{name}:{port}" for name, port in _metrics_ports().items()}


def _published(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(host address, what) of each published port, short or long syntax."""
    found = []
    for port in spec.get("ports", []):
        if isinstance(port, dict):
            found.append((str(port.get("host_ip", "")), str(port)))
        else:
            text = str(port)
            parts = text.rsplit(":", 2)
            found.append((parts[0] if len(parts) == 3 else "", text))
    return found


@pytest.mark.parametrize("name", sorted(_services()))
def test_ports_bind_loopback_only(name: str) -> None:
    spec = _services()[name]
    for address, port in _published(spec):
        assert address == "127.0.0.1", f"{name}: {port} is published on every interface"
    assert spec.get("network_mode") != "host", f"{name}: host networking publishes every port"


@pytest.mark.parametrize("name", sorted(_services()))
def test_images_are_pinned(name: str) -> None:
    spec = _services()[name]
    if spec.get("build") and "image" not in spec:
        return  # built from this repository's Dockerfile
    image = spec["image"]
    repository, _, tag = image.rpartition(":")
    assert repository and "/" not in tag, f"{name}: {image} has no tag"
    assert tag != "latest", f"{name}: {image}"


def test_base_images_are_pinned() -> None:
    bases = [line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("FROM ")]
    assert bases and all(":" in base and not base.endswith(":latest") for base in bases)


def _dockerfile_stages() -> dict[str, list[str]]:
    """Each build stage's instructions, by the name after ``AS``."""
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("FROM "):
            current = stages.setdefault(line.split()[-1], [])
        elif line and not line.startswith("#"):
            current.append(line)
    return stages


def test_the_image_runs_the_wheel_as_a_non_root_user() -> None:
    """The runtime stage installs the wheel the build stage made (no editable install, no compiler)
    and drops root; compose runs that stage under the package's version."""
    stages = _dockerfile_stages()
    assert set(stages) == {"build", "runtime"}
    build, runtime = "\n".join(stages["build"]), "\n".join(stages["runtime"])
    assert "python -m build" in build
    assert "COPY --from=build /dist/*.whl" in runtime and "-c /tmp/constraints.txt /tmp/*.whl" in runtime
    assert " -e " not in runtime and "gcc" not in runtime
    assert [line.split()[1] for line in stages["runtime"] if line.startswith("USER ")] == ["crawl"]
    assert 'ENTRYPOINT ["crawl-dedup"]' in runtime
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    for name, spec in _stage_services().items():
        assert spec["build"]["target"] == "runtime", name
        assert spec["image"] == f"crawl-dedup:{version.group(1)}", name


@pytest.mark.parametrize("name", sorted(_services()))
def test_mounted_files_exist(name: str) -> None:
    for volume in _services()[name].get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith((".", "/")):
            assert (ROOT / source).exists(), f"{name}: {source} is not in the repository"


def test_grafana_provisioning() -> None:
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in _services()["grafana"]["volumes"]}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    datasources = [source for path in sorted((provisioning / "datasources").glob("*.yml"))
                   for source in yaml.safe_load(path.read_text())["datasources"]]
    assert [source["url"] for source in datasources] == ["http://prometheus:9090"]
    for path in sorted((provisioning / "dashboards").glob("*.yml")):
        for provider in yaml.safe_load(path.read_text())["providers"]:
            folder = provider["options"]["path"]
            assert folder in mounts, f"{path.name}: {folder} is not mounted into grafana"
            assert list((ROOT / mounts[folder]).glob("*.json")), f"no dashboard in {mounts[folder]}"
    home = _environment(_services()["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    folder, _, file = home.rpartition("/")
    assert (ROOT / mounts[folder] / file).is_file()


def test_topic_service_creates_the_shared_topics() -> None:
    """As streams.runtime.runner.run_stage would: input and output topics with [topics]
    input_partitions partitions, the dead-letter topic with 1, all with the replication factor."""
    spec = _services()["kafka-topics"]
    script = "\n".join(spec["command"])
    created = dict(re.findall(r"^\s*create_topic\s+(\S+)\s+(\d+)\s*$", script, re.MULTILINE))
    environment = _environment(next(iter(_stage_services().values())))
    topic_settings = config.load(config.TopicSettings, "topics", environ=environment)
    topics = Topics(topic_settings.prefix)
    expected = {name: str(topic_settings.input_partitions) for name in topics.shared()}
    expected[topics.dead_letters] = "1"
    assert created == expected
    assert re.findall(r"--replication-factor (\d+)", script) == [str(topic_settings.replication_factor)]
    for stage in _stage_services().values():  # every stage agrees on the topic settings
        assert config.load(config.TopicSettings, "topics", environ=_environment(stage)) == topic_settings
    assert spec["image"] == _services()["kafka"]["image"]
