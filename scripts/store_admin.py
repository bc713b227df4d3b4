#!/usr/bin/env python3
"""Small admin calls against the test servers, with the standard library only.

wait-s3                  wait until the S3 bucket answers a signed listing (SigV4)
put-s3-marker KEY        put a zero-byte object KEY in the test bucket (`prefix/` = a folder marker)
create-azure-container   create the Azurite container (Shared Key signed PUT)
"""
import base64
import datetime as dt
import hashlib
import hmac
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE_ACCOUNT = "devstoreaccount1"


def s3_request(method, path, query="", body=b""):
    """A SigV4-signed request to the test S3 server: path is `/bucket/key`."""
    endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    key, secret, region = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_REGION"]
    host = endpoint.split("://", 1)[1]
    now = dt.datetime.now(dt.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    quoted = urllib.parse.quote(path, safe="/-_.~")
    headers = f"host:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n"
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = f"{method}\n{quoted}\n{query}\n{headers}\n{signed}\n{payload}"
    scope = f"{date}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    url = f"{endpoint}{quoted}" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, method=method, data=body if method == "PUT" else None, headers={
        "x-amz-date": amz_date, "x-amz-content-sha256": payload,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, Signature={sig}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status


def put_s3_marker(key):
    """Puts a zero-byte object named `key` (a folder marker when it ends with `/`)."""
    bucket = os.environ["LAKESWAP_TEST_S3_BUCKET"]
    return 0 if s3_request("PUT", f"/{bucket}/{key}") in (200, 201) else 1


def s3_list_ok():
    endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    bucket = os.environ["LAKESWAP_TEST_S3_BUCKET"]
    key, secret, region = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_REGION"]
    host = endpoint.split("://", 1)[1]
    now = dt.datetime.now(dt.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(b"").hexdigest()
    query = "list-type=2&max-keys=1"
    headers = f"host:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n"
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = f"GET\n/{bucket}\n{query}\n{headers}\n{signed}\n{payload}"
    scope = f"{date}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(f"{endpoint}/{bucket}?{query}", headers={
        "x-amz-date": amz_date, "x-amz-content-sha256": payload,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, Signature={sig}"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_s3():
    end = time.time() + 60
    while time.time() < end:
        if s3_list_ok():
            return 0
        time.sleep(0.3)
    print("store_admin: the S3 bucket never answered", file=sys.stderr)
    return 1


def create_azure_container():
    base = os.environ["AZURITE_BLOB_STORAGE_URL"].rstrip("/")
    container = os.environ["LAKESWAP_TEST_AZURE_CONTAINER"]
    date = dt.datetime.now(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")
    version = "2021-08-06"
    canon_headers = f"x-ms-date:{date}\nx-ms-version:{version}\n"
    canon_resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container"
    # VERB, then 11 standard headers: only Content-Type is set (urllib sends one with any body).
    to_sign = "PUT\n\n\n\n\napplication/octet-stream\n" + "\n" * 6 + canon_headers + canon_resource
    sig = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    req = urllib.request.Request(f"{base}/{AZURITE_ACCOUNT}/{container}?restype=container", method="PUT", data=b"",
                                 headers={"x-ms-date": date, "x-ms-version": version, "Content-Type": "application/octet-stream",
                                          "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{sig}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return 0 if r.status in (201, 200) else 1
    except urllib.error.HTTPError as e:
        if e.code == 409:  # already exists
            return 0
        print(f"store_admin: creating the container failed: {e.code} {e.read()[:300]!r}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "wait-s3":
        sys.exit(wait_s3())
    if cmd == "put-s3-marker":
        sys.exit(put_s3_marker(sys.argv[2]))
    if cmd == "create-azure-container":
        sys.exit(create_azure_container())
    sys.exit(__doc__)
