#!/usr/bin/env bash
# The head node's servers for infra/aws/cluster.yaml, both on 127.0.0.1 (reach them through an SSH tunnel):
#   MLflow   :5000  backend store PostgreSQL (the URI is read from AWS Secrets Manager with the instance role,
#                   passed in the environment, never on a command line or in a file), artifacts on S3
#   Prefect  :4200  with its work pool `llp` (process workers)
# Settings (environment, with these defaults):
#   LLP_AWS_REGION=us-west-2  LLP_DB_SECRET=llp/mlflow-db  LLP_ARTIFACTS=s3://llp-artifacts-ACCOUNT/mlflow
set -euo pipefail
export AWS_DEFAULT_REGION="${LLP_AWS_REGION:-us-west-2}"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false PREFECT_SERVER_ANALYTICS_ENABLED=false
logs="${HOME}/llp-logs"
mkdir -p "$logs"

MLFLOW_BACKEND_STORE_URI="$(python -c 'import sys, boto3
print(boto3.client("secretsmanager").get_secret_value(SecretId=sys.argv[1])["SecretString"])' \
  "${LLP_DB_SECRET:-llp/mlflow-db}")"
export MLFLOW_BACKEND_STORE_URI
nohup mlflow server --host 127.0.0.1 --port 5000 --workers 2 \
  --artifacts-destination "${LLP_ARTIFACTS:-s3://llp-artifacts-ACCOUNT/mlflow}" >"$logs/mlflow.log" 2>&1 &
unset MLFLOW_BACKEND_STORE_URI

nohup prefect server start --host 127.0.0.1 --port 4200 >"$logs/prefect.log" 2>&1 &
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
nohup prefect worker start --pool llp >"$logs/prefect-worker.log" 2>&1 &
echo "MLflow http://127.0.0.1:5000, Prefect http://127.0.0.1:4200 (logs in $logs)"
