"""``spark-submit`` entry point for the delivery report (``priority-pubsub report``).

    spark-submit --master k8s://https://KUBE_API --deploy-mode cluster ... \
        local:///opt/priority-pubsub/report_job.py s3://journals/fleet/ \
        --out /reports/latest --state /reports/state

The journals are where the sidecars upload them (``journal.upload.url``: ``<prefix>/date=
YYYY-MM-DD/hour=HH/journal-<replica>-<seq>.jsonl.gz``). ``s3://``, ``gs://`` and ``az://``
are listed and fetched by the driver with the stores' own clients, no Hadoop connector on
the classpath (the image needs ``priority-pubsub[spark,upload]``); a cluster with
hadoop-aws or the GCS connector may read the same prefix through them instead
(``'s3a://journals/fleet/date=*/hour=*/journal-*.jsonl.gz'``, ``--state s3a://...``).

The session is created here, without a master, so it is the one ``spark-submit`` configured
(``--master``, ``--conf``); the report then uses that active session and ignores its own
``--master`` default (``local[*]``, for laptops). Arguments are those of
``priority-pubsub report`` after the subcommand name. ``--out`` is a local directory of the
driver: mount a volume there; ``--state`` (what earlier runs read) may be any Hadoop path.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from priority_pubsub.analytics.report import main


def run(argv: list[str]) -> int:
    spark = SparkSession.builder.appName("priority-pubsub-report").getOrCreate()
    try:
        return main(argv)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
