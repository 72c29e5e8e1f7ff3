"""``tests/unit/`` mirrors the package, so "where is X tested" has one answer.

The unit tests of ``priority_pubsub/<package>/<module>.py`` live in
``tests/unit/<package>/test_<module>.py``, or in ``test_<module>_<aspect>.py`` beside it where
one file would be too long, or as ``test_<package>_<module>.py`` where the bare name would
repeat another test file's. A module tested elsewhere (against a real broker, on Spark, through
a sidecar) is listed below with the file that covers it; a module nothing tests yet is listed
as such, so the debt is visible and shrinks: an entry whose module gained its own test file,
or no longer exists, fails here until it is removed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "priority_pubsub"
UNIT = ROOT / "tests" / "unit"

_SPARK = "the report's Spark steps run on a real Spark"
_BROKER = "talks to a real broker: the driver conformance suite"
_THROUGH = "exercised by its callers' unit tests"
_SIDECAR = "served by a running sidecar: end to end"

COVERED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "analytics/capacity.py": ("tests/spark/test_starvation_capacity.py", _SPARK),
    "analytics/files.py": ("tests/unit/analytics/test_jvm.py", _THROUGH),
    "analytics/frames.py": ("tests/spark/test_report.py", _SPARK),
    "analytics/histogram.py": ("tests/unit/analytics/test_increment.py", _THROUGH),
    "analytics/load.py": ("tests/spark/test_report.py", _SPARK),
    "analytics/page.py": ("tests/spark/test_page.py", _SPARK),
    "analytics/progress.py": ("tests/unit/analytics/test_increment.py", _THROUGH),
    "analytics/publish.py": ("tests/spark/test_report.py", _SPARK),
    "analytics/report.py": ("tests/spark/test_report.py", _SPARK),
    "analytics/schema.py": ("tests/spark/test_journal_versions.py", _SPARK),
    "analytics/starvation.py": ("tests/spark/test_starvation_capacity.py", _SPARK),
    "analytics/state.py": ("tests/spark/test_incremental.py", _SPARK),
    "analytics/svg.py": ("tests/spark/test_page.py", _SPARK),
    "analytics/tables.py": ("tests/spark/test_rollup.py", _SPARK),
    "app/channel/bulk.py": ("tests/e2e/test_dapr_bulk.py", _SIDECAR),
    "app/channel/grpc.py": ("tests/unit/app/channel/test_envelope.py", "status mapping"),
    "app/forwarder.py": ("tests/unit/app/test_cloudevent.py", "Dapr's response table"),
    "app/request.py": ("tests/unit/app/test_cloudevent.py", _THROUGH),
    "commands/capacity_plan.py": ("tests/unit/settings/test_config_slots.py", "check's plan"),
    "commands/cli_reference.py": ("tests/unit/test_cli_help.py", "the help it renders"),
    "commands/demo.py": ("tests/e2e/test_cli.py", "a command: run as a subprocess"),
    "commands/ops.py": ("tests/e2e/test_local_release.py", "a command: run as a subprocess"),
    "commands/sample_app.py": ("tests/e2e/test_cli.py", "a command: run as a subprocess"),
    "core/app_request.py": ("tests/unit/app/channel/test_envelope.py", _THROUGH),
    "core/backoff.py": ("tests/unit/drivers/test_base.py", "the driver kit's backoff"),
    "core/erlang.py": ("tests/unit/telemetry/test_live_capacity.py", "the live sizing"),
    "core/errors.py": ("tests/unit/settings/test_config.py", "types: raised by every check"),
    "core/message.py": ("tests/unit/delivery/test_worker.py", "types: built by every test"),
    "core/outcome.py": ("tests/unit/delivery/test_settlement.py", "types: settled by every test"),
    "core/redaction.py": ("tests/unit/app/test_health.py", "the outage log's masking"),
    "dapr/check.py": ("tests/e2e/test_cli.py", "a command: run as a subprocess"),
    "dapr/components.py": ("tests/unit/dapr/test_rabbitmq_kind.py", _THROUGH),
    "dapr/configuration.py": ("tests/unit/dapr/test_flags.py", "daprd's --config flag"),
    "dapr/dead_letters.py": ("tests/e2e/test_dapr_e2e.py", "deadLetterTopic, end to end"),
    "dapr/delivery.py": ("tests/unit/dapr/test_plan.py", "the request daprd would send"),
    "dapr/discovery.py": ("tests/unit/app/channel/test_envelope.py", "gRPC subscriptions"),
    "dapr/kinds.py": ("tests/e2e/test_dapr_e2e.py", _SIDECAR),
    "dapr/manifests.py": ("tests/unit/dapr/test_plan.py", _THROUGH),
    "dapr/redis_kind.py": ("tests/e2e/test_redis_dapr.py", _SIDECAR),
    "dapr/runtime.py": ("tests/e2e/test_dapr_e2e.py", _SIDECAR),
    "dapr/secrets.py": ("tests/unit/dapr/test_plan.py", "secretKeyRef"),
    "dapr/setup.py": ("tests/unit/dapr/test_reload.py", _THROUGH),
    "dapr/snssqs.py": ("tests/e2e/test_dapr_streaming.py", _SIDECAR),
    "dapr/subscriptions.py": ("tests/unit/dapr/test_plan.py", "subscriptions and their merge"),
    "delivery/reload.py": ("tests/unit/settings/test_live.py", "live reload's parts"),
    "delivery/requeue.py": ("tests/drivers/test_redis_promote.py", _BROKER),
    "delivery/settler.py": ("tests/unit/delivery/test_dispatcher.py", _THROUGH),
    "drivers/gcp_pubsub/driver.py": ("tests/drivers/test_gcp_pubsub.py", _BROKER),
    "drivers/local/driver.py": ("tests/drivers/test_local.py", _BROKER),
    "drivers/local/sqlite_worker.py": ("tests/drivers/test_local.py", _BROKER),
    "drivers/rabbitmq/driver.py": ("tests/drivers/test_rabbitmq.py", _BROKER),
    "drivers/rabbitmq/topology.py": ("tests/drivers/test_rabbitmq.py", _BROKER),
    "drivers/rabbitmq/wire.py": ("tests/drivers/test_rabbitmq.py", _BROKER),
    "drivers/redis/driver.py": ("tests/drivers/test_redis_streams.py", _BROKER),
    "drivers/redis/scripts.py": ("tests/drivers/test_redis_promote.py", _BROKER),
    "drivers/registry.py": ("tests/drivers/test_release_then_kill.py", _BROKER),
    "drivers/sqs/driver.py": ("tests/drivers/test_sqs.py", _BROKER),
    "drivers/sqs/sns.py": ("tests/e2e/test_sqs_e2e.py", _SIDECAR),
    "kube/api.py": ("tests/unit/kube/test_deletion_cost.py", "against a stand-in API server"),
    "monitor/admin.py": ("tests/e2e/test_monitor.py", _SIDECAR),
    "monitor/build.py": ("tests/e2e/test_monitor.py", _SIDECAR),
    "monitor/history.py": ("tests/e2e/test_monitor.py", _SIDECAR),
    "monitor/page.py": ("tests/e2e/test_monitor.py", _SIDECAR),
    "monitor/waiting.py": ("tests/e2e/test_monitor.py", _SIDECAR),
    "provision/aws.py": ("tests/e2e/test_provision.py", "against moto"),
    "provision/gcp.py": ("tests/e2e/test_provision.py", "against the Pub/Sub emulator"),
    "publish_api/errors.py": ("tests/unit/publish_api/test_publish_api_envelope.py", "bodies"),
    "publish_api/grpc.py": ("tests/e2e/test_publish_api.py", _SIDECAR),
    "publish_api/http.py": ("tests/e2e/test_publish_api.py", _SIDECAR),
    "publish_api/server.py": ("tests/e2e/test_publish_api.py", _SIDECAR),
    "publish_api/service.py": ("tests/e2e/test_publish_api.py", _SIDECAR),
    "settings/dapr.py": ("tests/unit/dapr/test_plan.py", "the dapr section"),
    "settings/driver.py": ("tests/unit/settings/test_config.py", "the driver section"),
    "settings/plugins.py": ("tests/unit/settings/test_reference.py", "every driver's options"),
    "settings/publish_api.py": ("tests/unit/settings/test_config_grpc.py", "its defaults"),
    "settings/reload.py": ("tests/unit/settings/test_live.py", "reload_diff"),
    "settings/source.py": ("tests/unit/settings/test_config.py", _THROUGH),
    "settings/upload.py": ("tests/unit/shipping/test_shipper.py", _THROUGH),
    "settings/watch.py": ("tests/unit/settings/test_live.py", "the watch's fingerprint"),
    "shipping/azure_store.py": ("tests/e2e/test_journal_upload_e2e.py", "against Azurite"),
    "shipping/gcs_store.py": ("tests/e2e/test_journal_upload_e2e.py", "against a GCS stand-in"),
    "shipping/keys.py": ("tests/unit/shipping/test_shipper.py", "the key function"),
    "shipping/metrics.py": ("tests/unit/shipping/test_shipper.py", _THROUGH),
    "shipping/payload.py": ("tests/unit/shipping/test_shipper.py", "the payload"),
    "shipping/s3_store.py": ("tests/unit/shipping/test_shipper.py", _THROUGH),
    "shipping/spool.py": ("tests/unit/shipping/test_shipper.py", "the spool's bound"),
    "shipping/stores.py": ("tests/unit/shipping/test_shipper.py", _THROUGH),
    "telemetry/logs.py": ("tests/unit/publish_api/test_metadata.py", _THROUGH),
    "telemetry/metrics.py": ("tests/e2e/test_observability.py", _SIDECAR),
    "telemetry/observer.py": ("tests/unit/delivery/test_dispatcher.py", _THROUGH),
    "telemetry/server.py": ("tests/unit/delivery/test_receiver_finish_mode.py", "GET /drain"),
    "transforms/b64.py": ("tests/chaos/test_hostile_bodies.py", _SIDECAR),
    "transforms/base.py": ("tests/unit/transforms/test_sns_envelope.py", _THROUGH),
    "transforms/s3_claim_check.py": ("tests/e2e/test_claim_check.py", "against moto"),
}
"""Module (under priority_pubsub/) -> the test file that covers it, and why not its own."""

NO_TEST_YET: dict[str, str] = {
    "dapr/provisioning.py": "no test names it yet",
    "delivery/control.py": "its unit tests are being written (tests/unit/delivery/)",
    "delivery/leases.py": "its unit tests are being written (tests/unit/delivery/)",
}
"""Modules nothing tests by name: the debt, to shrink."""


def _modules() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if path.name not in ("__init__.py", "__main__.py"))


def _own_test(module: str) -> Path | None:
    """The module's own test file in the mirror, if it has one."""
    relative = Path(module)
    folder = UNIT / relative.parent
    name, package = relative.stem, relative.parent.name
    stems = [name] + ([f"{package}_{name}"] if package else [])
    for stem in stems:
        for pattern in (f"test_{stem}.py", f"test_{stem}_*.py"):
            found = sorted(folder.glob(pattern))
            if found:
                return found[0]
    return None


def test_every_module_has_its_own_test_file_or_names_the_file_that_covers_it() -> None:
    listed = COVERED_ELSEWHERE.keys() | NO_TEST_YET.keys()
    missing = [f"priority_pubsub/{module} -> tests/unit/{Path(module).parent}/"
               f"test_{Path(module).stem}.py".replace("/./", "/")
               for module in _modules() if _own_test(module) is None and module not in listed]
    assert not missing, "modules without a unit test file:\n" + "\n".join(missing)


def test_the_lists_name_only_modules_that_exist_and_have_no_own_test() -> None:
    modules = set(_modules())
    for module in COVERED_ELSEWHERE.keys() | NO_TEST_YET.keys():
        assert module in modules, f"{module} is gone: remove it from the list"
        own = _own_test(module)
        assert own is None, f"{module} has {own.relative_to(ROOT)}: remove it from the list"


def test_a_module_is_listed_once() -> None:
    assert not COVERED_ELSEWHERE.keys() & NO_TEST_YET.keys()


def test_every_covering_file_exists() -> None:
    gone = [f"{module}: {file}" for module, (file, _) in COVERED_ELSEWHERE.items()
            if not (ROOT / file).is_file()]
    assert not gone, "covering files that do not exist:\n" + "\n".join(gone)


def test_test_file_names_in_the_mirror_are_unique() -> None:
    names = [path.name for path in UNIT.rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []
