"""The chart and journal.upload: the final uploads' time is added to the pod's termination
grace period, upload keys come from the existing Secret, and values.yaml's commented example
for each cloud is a config the sidecar accepts."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from priority_pubsub.settings.config import validate_config
from tests.helm.conftest import Helm
from tests.helm.manifests import CHART, Doc, config_of, one, sidecar_container, validate_all

pytestmark = pytest.mark.helm
LOCAL = CHART / "ci" / "local-values.yaml"
URL = "config.journal.upload.url=s3://journals/fleet"


def _grace(docs: list[Doc]) -> int:
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    return int(spec["terminationGracePeriodSeconds"])


def test_the_final_uploads_time_is_added_to_the_termination_grace_period(helm: Helm) -> None:
    without = helm.render([LOCAL])
    grace = math.ceil(config_of(without)["shutdown"]["grace_s"])
    assert _grace(without) == grace + 15
    uploading = helm.render([LOCAL], [URL])
    validate_all(uploading)
    assert config_of(uploading)["journal"]["upload"] == {"url": "s3://journals/fleet"}
    assert _grace(uploading) == grace + 15 + 10  # stop_timeout_s' default
    longer = helm.render([LOCAL], [URL, "config.journal.upload.stop_timeout_s=42"])
    assert _grace(longer) == grace + 15 + 42


def test_upload_keys_come_from_the_existing_secret(helm: Helm) -> None:
    docs = helm.render([LOCAL], [URL, "secrets.existingSecret=journal-keys",
                                 "secrets.uploadKeys.access_key_id=aws-id",
                                 "secrets.uploadKeys.secret_access_key=aws-secret"])
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    env = {item["name"]: item for item in sidecar_container(pod)["env"]}
    for key, secret_key in (("ACCESS_KEY_ID", "aws-id"), ("SECRET_ACCESS_KEY", "aws-secret")):
        assert env[f"PRIORITY_PUBSUB_JOURNAL__UPLOAD__{key}"]["valueFrom"] == {
            "secretKeyRef": {"name": "journal-keys", "key": secret_key}}
    assert "aws-secret" not in one(docs, "ConfigMap")["data"]["config.yaml"]


def test_each_commented_cloud_example_is_a_config_the_sidecar_accepts() -> None:
    text = (CHART / "values.yaml").read_text()
    examples = re.findall(r"^  # (journal: \{.*?\}\})\n", _joined_comments(text), re.M)
    schemes = set()
    for example in examples:
        journal = yaml.safe_load(example)["journal"]
        settings = validate_config({"queues": [{"name": "q"}], "journal": journal})
        assert settings.journal is not None
        assert settings.journal.upload is not None
        schemes.add(settings.journal.upload.kind)
    assert schemes == {"s3", "gcs", "azure"}


def _joined_comments(text: str) -> str:
    """Comment lines continued on the next comment line (``#           upload: ...``)
    joined into one."""
    return re.sub(r"\n  #\s{5,}", " ", text)
