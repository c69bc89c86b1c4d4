#!/usr/bin/env python3
"""Minimal clients (standard library only) for the storage emulators that
hack/backends.sh runs: create the one bucket/container at start-up, and check
that each server takes a multipart upload and lists it, as the backup runner
(object_store) will.

Usage (endpoints and credentials from the environment that
`hack/backends.sh env` prints):
    objstore.py s3-mkbucket | azure-mkcontainer
    objstore.py check-s3 | check-gcs | check-azure
    objstore.py ls-s3 | ls-gcs | ls-azure        (buckets/containers, one a line)
"""
import base64
import datetime
import hashlib
import hmac
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

MIB = 1024 * 1024


class HTTPError(Exception):
    pass


def http(method, url, body=b"", headers=None, ok=(200, 201, 202, 204)):
    req = urllib.request.Request(url, data=body if method not in ("GET", "HEAD", "DELETE") or body else None,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, hdrs, data = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, hdrs, data = e.code, e.headers, e.read()
    if status not in ok:
        raise HTTPError(f"{method} {url}: HTTP {status}: {data[:500].decode(errors='replace')}")
    return status, hdrs, data


def local(tag):
    return tag.rsplit("}", 1)[-1]


def xml_texts(data, name):
    return [el.text or "" for el in ET.fromstring(data).iter() if local(el.tag) == name]


def payload(size, seed):
    block = hashlib.sha256(seed.encode()).digest() * (MIB // 32)
    return (block * (size // len(block) + 1))[:size]


# --- S3 (AWS Signature Version 4) --------------------------------------------


def s3_request(method, bucket="", key="", query=None, body=b"", ok=(200, 204)):
    endpoint = os.environ["S3_ENDPOINT"].rstrip("/")
    region = os.environ.get("AWS_REGION", "us-east-1")
    access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    host = urllib.parse.urlsplit(endpoint).netloc
    path = "/" + "/".join(urllib.parse.quote(p, safe="-_.~/") for p in (bucket, key) if p)
    q = sorted((query or {}).items())
    qs = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in q)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    body_hash = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": body_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, path, qs, "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, body_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, Signature={sig}"
    del headers["host"]
    return http(method, endpoint + path + ("?" + qs if qs else ""), body, headers, ok)


def s3_mkbucket():
    bucket = os.environ["S3_BUCKET"]
    status, _, _ = s3_request("HEAD", bucket, ok=(200, 404))
    if status == 404:
        s3_request("PUT", bucket)


def ls_s3():
    _, _, data = s3_request("GET")
    print("\n".join(xml_texts(data, "Name")))


def check_s3():
    bucket, key = os.environ["S3_BUCKET"], "bosun-check/multipart.bin"
    parts = [payload(5 * MIB, "s3-1"), payload(MIB + 7, "s3-2")]  # S3: parts but the last >= 5 MiB
    _, _, data = s3_request("POST", bucket, key, {"uploads": ""})
    upload_id = xml_texts(data, "UploadId")[0]
    etags = []
    for i, part in enumerate(parts, 1):
        _, hdrs, _ = s3_request("PUT", bucket, key, {"partNumber": str(i), "uploadId": upload_id}, part)
        etags.append(hdrs["ETag"])
    done = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{i}</PartNumber><ETag>{e}</ETag></Part>" for i, e in enumerate(etags, 1)
    ) + "</CompleteMultipartUpload>"
    s3_request("POST", bucket, key, {"uploadId": upload_id}, done.encode())
    _, _, data = s3_request("GET", bucket, query={"list-type": "2", "prefix": "bosun-check/"})
    assert key in xml_texts(data, "Key"), f"{key} not listed"
    _, _, got = s3_request("GET", bucket, key)
    assert got == b"".join(parts), "downloaded object differs"
    s3_request("DELETE", bucket, key)
    return f"S3 {os.environ['S3_ENDPOINT']}: multipart upload (2 parts, {len(got)} bytes), list, get, delete ok"


# --- GCS (fake-gcs-server: JSON API, no authentication) -----------------------


def ls_gcs():
    _, _, data = http("GET", os.environ["GCS_ENDPOINT"] + "/storage/v1/b")
    print("\n".join(b["name"] for b in json.loads(data).get("items", [])))


def check_gcs():
    ep, bucket, name = os.environ["GCS_ENDPOINT"], os.environ["GCS_BUCKET"], "bosun-check/resumable.bin"
    obj = urllib.parse.quote(name, safe="")
    chunks = [payload(256 * 1024 * 4, "gcs-1"), payload(12345, "gcs-2")]  # chunks: multiples of 256 KiB
    total = sum(map(len, chunks))
    _, hdrs, _ = http("POST", f"{ep}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&name={obj}",
                      b"{}", {"Content-Type": "application/json"})
    session, offset = hdrs["Location"], 0
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        rng = f"bytes {offset}-{offset + len(chunk) - 1}/{total if last else '*'}"
        http("PUT", session, chunk, {"Content-Range": rng}, ok=(200, 201, 308))
        offset += len(chunk)
    _, _, data = http("GET", f"{ep}/storage/v1/b/{bucket}/o?prefix=bosun-check/")
    assert name in [o["name"] for o in json.loads(data).get("items", [])], f"{name} not listed"
    _, _, got = http("GET", f"{ep}/storage/v1/b/{bucket}/o/{obj}?alt=media")
    assert got == b"".join(chunks), "downloaded object differs"
    http("DELETE", f"{ep}/storage/v1/b/{bucket}/o/{obj}")
    # object_store's GCS client speaks the XML API: PUT for small objects,
    # the S3-style multipart upload for streams, and an S3-style listing.
    xml = f"{ep}/{bucket}/bosun-check/xml-multipart.bin"
    parts = [payload(5 * MIB, "gcs-x1"), payload(3 * MIB + 5, "gcs-x2")]
    _, _, data = http("POST", xml + "?uploads", b"", {"Content-Type": "application/octet-stream"})
    upload_id = xml_texts(data, "UploadId")[0]
    etags = []
    for i, part in enumerate(parts, 1):
        _, hdrs, _ = http("PUT", f"{xml}?partNumber={i}&uploadId={upload_id}", part)
        etags.append(hdrs["ETag"])
    done = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{i}</PartNumber><ETag>{e}</ETag></Part>" for i, e in enumerate(etags, 1)
    ) + "</CompleteMultipartUpload>"
    http("POST", f"{xml}?uploadId={upload_id}", done.encode())
    small = f"{ep}/{bucket}/bosun-check/xml-put.bin"
    _, hdrs, _ = http("PUT", small, b"small", {"Content-Type": "application/octet-stream"})
    assert hdrs.get("ETag"), "XML PUT answered without an ETag"
    _, _, data = http("GET", f"{ep}/{bucket}?list-type=2&prefix=bosun-check/")
    listed = xml_texts(data, "Key")
    assert "bosun-check/xml-multipart.bin" in listed and "bosun-check/xml-put.bin" in listed, f"XML listing: {listed}"
    _, _, got = http("GET", xml)
    assert got == b"".join(parts), "downloaded object differs (XML multipart)"
    for url in (xml, small):
        http("DELETE", url)
    return (f"GCS {ep}: JSON API resumable upload (2 chunks, {total} bytes), XML API multipart upload "
            f"(2 parts, {len(got)} bytes) and PUT, JSON and XML listing, get, delete ok")


# --- Azure Blob (Azurite: Shared Key) ------------------------------------------


def azure_request(method, path, query=None, body=b"", extra=None, ok=(200, 201, 202)):
    account, key = os.environ["AZURE_STORAGE_ACCOUNT_NAME"], os.environ["AZURE_STORAGE_ACCOUNT_KEY"]
    endpoint = os.environ["AZURE_ENDPOINT"].rstrip("/")  # http://host:port/<account>
    q = query or {}
    headers = {"x-ms-date": datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT"),
               "x-ms-version": "2021-08-06", **(extra or {})}
    if method in ("PUT", "POST"):  # else urllib adds a form Content-Type, which is signed
        headers.setdefault("Content-Type", "application/octet-stream")
    length = str(len(body)) if body else ""
    ms = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
    resource = f"/{account}{urllib.parse.urlsplit(endpoint).path}{path}"
    resource += "".join(f"\n{k.lower()}:{v}" for k, v in sorted(q.items()))
    to_sign = "\n".join([method, "", "", length, "", headers.get("Content-Type", ""), "", "", "", "", "", ""]) + "\n" + ms + resource
    sig = base64.b64encode(hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {account}:{sig}"
    qs = urllib.parse.urlencode(q)
    return http(method, endpoint + path + ("?" + qs if qs else ""), body, headers, ok)


def azure_mkcontainer():
    c = os.environ["AZURE_CONTAINER"]
    status, _, _ = azure_request("PUT", f"/{c}", {"restype": "container"}, ok=(201, 409))
    if status == 409:  # exists already
        azure_request("GET", f"/{c}", {"restype": "container"})


def ls_azure():
    _, _, data = azure_request("GET", "/", {"comp": "list"})
    print("\n".join(xml_texts(data, "Name")))


def check_azure():
    c, name = os.environ["AZURE_CONTAINER"], "bosun-check/blocks.bin"
    blocks = [payload(4 * MIB, "az-1"), payload(MIB + 3, "az-2")]
    ids = [base64.b64encode(f"{i:08d}".encode()).decode() for i in range(len(blocks))]
    for bid, block in zip(ids, blocks):
        azure_request("PUT", f"/{c}/{name}", {"comp": "block", "blockid": bid}, block)
    lst = "<?xml version='1.0' encoding='utf-8'?><BlockList>" + "".join(f"<Latest>{b}</Latest>" for b in ids) + "</BlockList>"
    azure_request("PUT", f"/{c}/{name}", {"comp": "blocklist"}, lst.encode())
    _, _, data = azure_request("GET", f"/{c}", {"restype": "container", "comp": "list", "prefix": "bosun-check/"})
    assert name in xml_texts(data, "Name"), f"{name} not listed"
    _, _, got = azure_request("GET", f"/{c}/{name}")
    assert got == b"".join(blocks), "downloaded blob differs"
    azure_request("DELETE", f"/{c}/{name}")
    return f"Azure {os.environ['AZURE_ENDPOINT']}: block blob (2 blocks, {len(got)} bytes), list, get, delete ok"


COMMANDS = {
    "s3-mkbucket": s3_mkbucket, "azure-mkcontainer": azure_mkcontainer,
    "check-s3": check_s3, "check-gcs": check_gcs, "check-azure": check_azure,
    "ls-s3": ls_s3, "ls-gcs": ls_gcs, "ls-azure": ls_azure,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    try:
        out = COMMANDS[sys.argv[1]]()
    except (HTTPError, AssertionError, KeyError, OSError) as e:
        sys.exit(f"objstore.py {sys.argv[1]}: {type(e).__name__}: {e}")
    if out:
        print(out)
