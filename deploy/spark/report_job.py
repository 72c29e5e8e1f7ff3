"""``spark-submit`` entry point for the delivery report (``priority-pubsub report``).

    spark-submit --master k8s://https://KUBE_API --deploy-mode cluster ... \
        local:///opt/priority-pubsub/report_job.py \
        's3a://journals/fleet/date=*/hour=*/journal-*.jsonl.gz' \
        --out /reports/latest --state /reports/state

The journals are where the sidecars upload them (``journal.upload.url``: ``<prefix>/date=
YYYY-MM-DD/hour=HH/journal-<replica>-<seq>.jsonl.gz``). On a cluster the executors read
them through Spark's connector (hadoop-aws for ``s3a://``, the GCS connector for
``gs://``). Without a connector, ``s3://``, ``gs://`` and ``az://`` are listed and fetched
with the stores' own clients (``priority-pubsub[spark,upload]``) to the driver's disk, which
only a local master reads: ``spark-submit --master 'local[*]' ... s3://journals/fleet/``.

The session is created here, without a master, so it is the one ``spark-submit`` configured
(``--master``, ``--conf``); the report then uses that active session and ignores its own
``--master`` default (``local[*]``, for laptops). This runs ``priority-pubsub report`` itself:
its arguments, help and defaults, after the subcommand name. ``--out`` is a local directory
of the driver: mount a volume there; ``--state`` (what earlier runs read) may be any Hadoop path.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from priority_pubsub.cli import report_command_line


def run(argv: list[str]) -> int:
    spark = SparkSession.builder.appName("priority-pubsub-report").getOrCreate()
    try:
        return report_command_line(argv)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
