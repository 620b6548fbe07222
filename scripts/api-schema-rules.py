#!/usr/bin/env python3
"""Each rule of a request body that the OpenAPI document states, checked both ways against
a live control plane (scripts/api-conformance starts it): a body breaking the rule is
refused by the server (400 with its code) and by the document's schema (JSON Schema
2020-12, as OpenAPI 3.1 reads it); a neighbour that keeps the rule is accepted by both.

Usage: scripts/api-schema-rules.py http://<api address> <operator key>
(jsonschema comes with schemathesis, which scripts/test installs.)
"""

import json
import sys
import urllib.error
import urllib.request

from jsonschema import Draft202012Validator

API, KEY = sys.argv[1], sys.argv[2]


def call(method, path, body=None, key=KEY, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


_, DOC = call("GET", "/api/v1/openapi.json")


def schema_allows(name, body):
    root = {"$ref": f"#/components/schemas/{name}", "components": DOC["components"]}
    return Draft202012Validator(root).is_valid(body)


def fresh_key(role="operator"):
    """A new key: its own report budget (5 at once), apart from the run's other calls."""
    status, created = call("POST", "/api/v1/keys", {"name": "schema rules", "role": role})
    assert status == 201, (status, created)
    return created["key"]


def new_link():
    status, link = call("POST", "/api/v1/links", {"long_url": "https://example.com/rules"})
    assert status == 201, (status, link)
    return link["code"]


_, DOMAINS = call("GET", "/api/v1/domains")
DEFAULT_DOMAIN = DOMAINS["domains"][0]["name"]
FUTURE = "2030-01-01T00:00:00Z"
failures = []


def case(name, schema, send, refused, accepted):
    """`refused`: bodies the server answers 400 `<code>` and the schema refuses; `accepted`:
    bodies the server answers 2xx (or a status a rule the schema cannot state explains,
    given with the body) and the schema allows."""
    problems = []
    for body, code in refused:
        status, answer = send(body)
        got = (answer or {}).get("error", {}).get("code") if isinstance(answer, dict) else None
        if (status, got) != (400, code):
            problems.append(f"the server answered {status} {got} to {body!r}, not 400 {code}")
        if schema_allows(schema, body):
            problems.append(f"the document allows {body!r}, which the server refuses ({code})")
    for body, want in accepted:
        status, answer = send(body)
        if status != want:
            problems.append(f"the server answered {status} {answer} to {body!r}, not {want}")
        if not schema_allows(schema, body):
            problems.append(f"the document refuses {body!r}, which the server accepts")
    print(("ok   " if not problems else "FAIL ") + name)
    for p in problems:
        print("     " + p)
    failures.extend(problems)


def create(body):
    return call("POST", "/api/v1/links", body)


def edit(body):
    code = new_link()
    return call("PATCH", f"/api/v1/links/{code}", body, headers={"If-Match": '"1"'})


url = "https://example.com/p"
case(
    "a create with both expires_at and ttl_seconds is refused by the document",
    "CreateLinkRequest",
    create,
    refused=[({"long_url": url, "expires_at": FUTURE, "ttl_seconds": 60}, "invalid_expiry")],
    accepted=[
        ({"long_url": url, "expires_at": FUTURE, "ttl_seconds": None}, 201),
        ({"long_url": url, "expires_at": None, "ttl_seconds": 60}, 201),
        ({"long_url": url, "ttl_seconds": 60}, 201),
    ],
)
case(
    "an edit with both expires_at (even null) and ttl_seconds is refused by the document",
    "EditLinkRequest",
    edit,
    refused=[
        ({"expires_at": FUTURE, "ttl_seconds": 60}, "invalid_expiry"),
        ({"expires_at": None, "ttl_seconds": 60}, "invalid_expiry"),
    ],
    accepted=[({"expires_at": None, "ttl_seconds": None}, 200), ({"ttl_seconds": 60}, 200)],
)
case(
    "an edit that gives no field is refused by the document",
    "EditLinkRequest",
    edit,
    refused=[
        ({}, "empty_edit"),
        ({"redirect": None, "ttl_seconds": None, "long_url": None, "forward_query": None}, "empty_edit"),
    ],
    accepted=[({"forward_query": True}, 200), ({"password": None}, 200), ({"redirect": 301}, 200)],
)
case(
    "a reserved word as an alias, in any case, is refused by the document",
    "CreateLinkRequest",
    create,
    refused=[
        ({"long_url": url, "custom_alias": "IMPORT"}, "reserved_alias"),
        ({"long_url": url, "custom_alias": "Abuse-Reports"}, "reserved_alias"),
    ],
    accepted=[({"long_url": url, "custom_alias": "imports"}, 201), ({"long_url": url, "custom_alias": None}, 201)],
)
case(
    "a password with a control character is refused by the document",
    "CreateLinkRequest",
    create,
    refused=[({"long_url": url, "password": "pass\u0007word"}, "invalid_password")],
    accepted=[({"long_url": url, "password": "pass word"}, 201)],
)
case(
    "a new password with a control character is refused by the document",
    "EditLinkRequest",
    edit,
    refused=[({"password": "pass\u0000word"}, "invalid_password")],
    accepted=[({"password": "pass word"}, 200)],
)

domains = iter(range(1000))


def new_domain(field, value):
    return {"name": f"rules{next(domains)}.example.com", field: value}


for field in ["not_found_url", "expired_url", "root_url"]:
    case(
        f"a domain's {field} that is empty or not http(s) is refused by the document",
        "CreateDomainRequest",
        lambda body: call("POST", "/api/v1/domains", body),
        refused=[
            (new_domain(field, ""), "invalid_url"),
            (new_domain(field, "ftp://example.com/"), "invalid_url"),
        ],
        accepted=[(new_domain(field, "https://example.com/page"), 201), (new_domain(field, None), 201)],
    )
# `name` is what makes a body valid here; the schema is checked with one that is.
case(
    "an operator key scoped to domains is refused by the document",
    "CreateKeyRequest",
    lambda body: call("POST", "/api/v1/keys", body),
    refused=[
        ({"name": "k", "role": "operator", "domains": [DEFAULT_DOMAIN]}, "invalid_domains"),
    ],
    accepted=[
        ({"name": "k", "role": "operator", "domains": None}, 201),
        ({"name": "k", "role": "operator"}, 201),
        ({"name": "k", "role": "creator", "domains": [DEFAULT_DOMAIN]}, 201),
    ],
)

reported = new_link()


def report(body):
    # Each report with a key of its own: a key may send 5 at once.
    return call("POST", "/api/v1/abuse-reports", body, key=fresh_key())


reason = "a phishing page"
case(
    "an abuse report whose link is not a short URL or a code is refused by the document",
    "ReportRequest",
    report,
    refused=[
        ({"link": "0", "reason": reason}, "invalid_link"),
        ({"link": "ab", "reason": reason}, "invalid_link"),
        ({"link": f"http://{DEFAULT_DOMAIN}/{reported}/more", "reason": reason}, "invalid_link"),
        ({"link": f"ftp://{DEFAULT_DOMAIN}/{reported}", "reason": reason}, "invalid_link"),
        ({"link": f"http://{DEFAULT_DOMAIN}/a%62c", "reason": reason}, "invalid_link"),
        ({"link": "http://a.1/abc", "reason": reason}, "invalid_link"),
    ],
    accepted=[
        ({"link": reported, "reason": reason}, 202),
        ({"link": f"http://{DEFAULT_DOMAIN}/{reported}", "reason": reason}, 202),
        ({"link": f"HTTP://{DEFAULT_DOMAIN}/{reported}?utm=x#top", "reason": reason}, 202),
        ({"link": "no-such-code", "reason": reason}, 404),
        # A short URL's shape on a host this service does not have: a rule the schema
        # cannot state (scripts/schemathesis_hooks.py), so the document allows it.
        ({"link": f"https://other.example/{reported}", "reason": reason}, 400),
    ],
)
case(
    "an abuse report's reason of white space or with a control character is refused by the document",
    "ReportRequest",
    report,
    refused=[
        ({"link": reported, "reason": "   "}, "invalid_reason"),
        ({"link": reported, "reason": "bad\u0007page"}, "invalid_reason"),
    ],
    accepted=[({"link": reported, "reason": " a bad\npage "}, 202)],
)

if failures:
    print(f"api-schema-rules: {len(failures)} problems")
    sys.exit(1)
print("api-schema-rules: every rule stated both ways")
