#!/usr/bin/env bash
# Submit the delivery report to a Kubernetes cluster with plain spark-submit (cluster mode).
#
# The image needs Spark + Python + `pip install 'priority-pubsub[spark]'` + report_job.py at
# /opt/priority-pubsub/ (e.g. FROM the apache/spark-py image) and hadoop-aws for s3a://.
# Journals are read from the prefix the sidecars upload to (journal.upload.url:
# s3://priority-pubsub-journals/fleet), through Spark's connector so that every executor
# reads them (credentials: IRSA through the driver's and executors' ServiceAccount). Without
# a connector, a single-node run reads s3://, gs:// and az:// with the stores' own clients
# ('priority-pubsub[spark,upload]'): spark-submit --master 'local[*]' ... s3://BUCKET/fleet/
# report.html and the Parquet tables are written to the driver's --out directory: a PVC
# mounted at /reports. Each run reads only the journal files no earlier run read; the state
# that makes that possible lives at STATE (any Hadoop path: the PVC, or an object store
# through a connector; the commit is a manifest written last). Run it every hour or every day.
#
# Locally, the same job:  spark-submit --master 'local[*]' deploy/spark/report_job.py \
#                             './data/journal/*.jsonl' --out ./report
set -euo pipefail

: "${KUBE_API:?set KUBE_API, e.g. https://10.0.0.1:443}"
IMAGE="${IMAGE:-registry.example.com/priority-pubsub-report:0.2.0}"
NAMESPACE="${NAMESPACE:-analytics}"
JOURNALS="${JOURNALS:-s3a://priority-pubsub-journals/fleet/date=*/hour=*/journal-*.jsonl.gz}"
STATE="${STATE:-/reports/state}"

exec spark-submit \
  --master "k8s://${KUBE_API}" \
  --deploy-mode cluster \
  --name priority-pubsub-report \
  --conf spark.kubernetes.namespace="${NAMESPACE}" \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=priority-pubsub-report \
  --conf spark.executor.instances=4 \
  --conf spark.executor.memory=4g \
  --conf spark.driver.memory=2g \
  --conf spark.sql.session.timeZone=UTC \
  --conf spark.hadoop.fs.s3a.aws.credentials.provider=com.amazonaws.auth.WebIdentityTokenCredentialsProvider \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.reports.options.claimName=priority-pubsub-reports \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.reports.mount.path=/reports \
  local:///opt/priority-pubsub/report_job.py \
  "${JOURNALS}" --out /reports/latest --state "${STATE}" --json --target-wait-s 60
