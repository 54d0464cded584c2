#!/usr/bin/env bash
# The head node's servers for infra/aws/cluster.yaml, both on 127.0.0.1 (reach them through an SSH tunnel):
#   MLflow   :5000  backend store PostgreSQL, artifacts on S3
#   Prefect  :4200  backend store PostgreSQL (deployments and run history outlive the container), with its
#                   work pool `llp` (process workers)
# Both database URIs are read from AWS Secrets Manager with the instance role and passed to their server in its
# environment only, never on a command line or in a file. MLflow binds to 127.0.0.1 and is reached as
# 127.0.0.1:5000, a Host its default --allowed-hosts accepts.
# Settings (environment, with these defaults):
#   LLP_AWS_REGION=us-west-2  LLP_DB_SECRET=llp/mlflow-db  LLP_PREFECT_DB_SECRET=llp/prefect-db
#   LLP_ARTIFACTS=s3://llp-artifacts-ACCOUNT/mlflow
set -euo pipefail
export AWS_DEFAULT_REGION="${LLP_AWS_REGION:-us-west-2}"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false PREFECT_SERVER_ANALYTICS_ENABLED=false
logs="${HOME}/llp-logs"
mkdir -p "$logs"

secret() { # the value of a Secrets Manager secret
  python -c 'import sys, boto3
print(boto3.client("secretsmanager").get_secret_value(SecretId=sys.argv[1])["SecretString"])' "$1"
}

mlflow_db="$(secret "${LLP_DB_SECRET:-llp/mlflow-db}")"
prefect_db="$(secret "${LLP_PREFECT_DB_SECRET:-llp/prefect-db}")" # postgresql+asyncpg://USER:PASSWORD@HOST:5432/prefect

MLFLOW_BACKEND_STORE_URI="$mlflow_db" nohup mlflow server --host 127.0.0.1 --port 5000 --workers 2 \
  --artifacts-destination "${LLP_ARTIFACTS:-s3://llp-artifacts-ACCOUNT/mlflow}" >"$logs/mlflow.log" 2>&1 &

PREFECT_API_DATABASE_CONNECTION_URL="$prefect_db" nohup prefect server start --host 127.0.0.1 --port 4200 \
  >"$logs/prefect.log" 2>&1 &
unset mlflow_db prefect_db

export PREFECT_API_URL=http://127.0.0.1:4200/api
python - <<'PY'
import time, urllib.request
for _ in range(90):
    try:
        urllib.request.urlopen("http://127.0.0.1:4200/api/health", timeout=2)
        break
    except OSError:
        time.sleep(2)
PY
prefect work-pool create llp --type process --overwrite >/dev/null
# the worker's flow runs `llp run` on this node as the Ray driver: it joins the cluster this node heads
RAY_ADDRESS="${RAY_ADDRESS:-127.0.0.1:6379}" nohup prefect worker start --pool llp >"$logs/prefect-worker.log" 2>&1 &
echo "MLflow http://127.0.0.1:5000, Prefect http://127.0.0.1:4200 (logs in $logs)"
