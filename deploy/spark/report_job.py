"""``spark-submit`` entry point for the delivery report (``priority-pubsub report``).

    spark-submit --master k8s://https://KUBE_API --deploy-mode cluster ... \
        local:///opt/priority-pubsub/report_job.py 's3a://journals/*/journal-*.jsonl' \
        --out /reports --state s3a://journals/report-state

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
