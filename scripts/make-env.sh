#!/usr/bin/env bash
# Write docker/.env (or the file given) with fresh random secrets (never committed: .env is
# git-ignored).
set -euo pipefail
ENV_FILE="${1:-$(cd "$(dirname "$0")/.." && pwd)/docker/.env}"
if [[ -e "$ENV_FILE" ]]; then
  echo "$ENV_FILE exists; delete it first to rotate the secrets" >&2
  exit 1
fi
secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
fernet() { python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())'; }
umask 077
cat > "$ENV_FILE" <<ENV
POSTGRES_PASSWORD=$(secret)
REDIS_PASSWORD=$(secret)
AIRFLOW_FERNET_KEY=$(fernet)
AIRFLOW_JWT_SECRET=$(secret)
AIRFLOW_API_SECRET_KEY=$(secret)
ENV
echo "wrote $ENV_FILE"
