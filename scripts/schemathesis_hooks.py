"""Hooks of scripts/api-conformance (loaded through SCHEMATHESIS_HOOKS).

`scripts/schemathesis.toml` lets the operations below answer 400 to a request the OpenAPI
document allows, because each has rules JSON Schema cannot state (a time in the future,
the domains this service has, a cursor it handed out...). That alone would hide every rule
the document could state but does not (schemathesis' ST202). The check here closes the
gap: a 400 to a schema-valid request passes only when its error is one of the listed
rules the document cannot state, named by code and message; any other 400 fails the run,
and the rule belongs in the document. docs/http.md lists the same rules for people.
"""

import re

import schemathesis

# The target policy of `core/src/target.rs` beyond the document's pattern (which states the
# scheme, an empty URL, whitespace and control characters): the URL Standard's parser, the
# length in bytes (the schema counts characters), this service's own hosts, blocked hosts,
# DNS lengths, mixed scripts.
TARGET_POLICY = (
    r"long_url (is longer than \d+ bytes|is not a valid URL|must have a host"
    r"|must not contain user information|must not point at this service's own short links"
    r"|'s domain is blocked|'s host is longer than DNS allows \(.*\)|'s port must be from 1 to 65535"
    r"|'s host mixes scripts in one label, as look-alike names do"
    r"|has a '%' that is not followed by two hexadecimal digits"
    r"|'s host has an empty label \(a leading dot, or two dots in a row\))"
)
THREAT = ("blocked_target", r"long_url is on the threat list .*")
EXPIRY = ("invalid_expiry", r"expires_at must be (in the future|at most 10 years ahead)")
UNKNOWN_DOMAIN = ("unknown_domain", r"domain is not a domain of this service")

# A rule's target (docs/http.md "Rules"): the target policy naming the rule's field, the
# threat lists, and what the document cannot state of an app's own scheme (the operator's
# `api.app_schemes`, and only in a rule for iOS or Android alone).
RULE_TARGET = r"rules\[\d+\]\.(split\[\d+\]\.)?target"
RULE_RULES = [
    ("invalid_url", RULE_TARGET + TARGET_POLICY[len("long_url"):]),
    ("invalid_url", RULE_TARGET + r" (must be an http or https URL.*|an app's own scheme .*"
     r"|at most 2,048 bytes, without whitespace or control characters|is not a URL: .*)"),
    ("blocked_target", RULE_TARGET + r" is on the threat list .*"),
    # Across rules and bytes, which JSON Schema cannot count.
    ("invalid_rules", r"rules\[\d+\]: can never match: rule \d+ has no condition and matches every visitor"),
    ("invalid_rules", r"a link's rules name at most 32 distinct languages, not \d+"),
    ("invalid_rules", r"a link's rules take at most 32768 bytes as JSON, not \d+"),
]

# Per operation: the 400s (error code, the whole message as a regular expression) that a
# schema-valid request may get.
NOT_STATABLE = {
    "POST /api/v1/links": [
        ("invalid_url", TARGET_POLICY),
        THREAT,
        EXPIRY,
        UNKNOWN_DOMAIN,
        *RULE_RULES,
    ],
    "PATCH /api/v1/links/{code}": [("invalid_url", TARGET_POLICY), THREAT, EXPIRY, *RULE_RULES],
    "GET /api/v1/links": [("invalid_cursor", r"cursor is not valid")],
    "GET /api/v1/links/{code}/stats": [
        ("invalid_date", r"from must not be after to"),
        ("invalid_date", r"the range may cover at most 366 days"),
        # A defaulted `from` (29 days before `to`) before 0000-01-01.
        ("invalid_date", r"dates must be from 0000-01-01 to 9999-12-31"),
    ],
    "GET /api/v1/stats": [
        ("invalid_date", r"from must not be after to"),
        ("invalid_date", r"the range may cover at most 366 days"),
        ("invalid_date", r"dates must be from 0000-01-01 to 9999-12-31"),
    ],
    "POST /api/v1/domains": [("invalid_url", r"(not_found_url|expired_url|root_url): " + TARGET_POLICY)],
    "POST /api/v1/keys": [("invalid_domains", r'".*" is not a domain of this service')],
    "POST /api/v1/abuse-reports": [("invalid_link", r"link's host is not a domain of this service")],
}


@schemathesis.check
def refused_only_for_rules_the_schema_cannot_state(ctx, response, case):
    """A 400 to a request the document allows names a rule the document cannot state."""
    allowed = NOT_STATABLE.get(case.operation.label)
    meta = case.meta
    if allowed is None or meta is None or not meta.generation.mode.is_positive:
        return None
    if response.status_code != 400:
        return None
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"a 400 without the error body: {response.text[:200]!r}")
    if any(code == c and re.fullmatch(m, message, re.DOTALL) for c, m in allowed):
        return None
    raise AssertionError(
        f"Schema-valid request rejected for a rule the document does not state: 400 {code}: {message}\n"
        "State the rule in the OpenAPI document, or list it in scripts/schemathesis_hooks.py "
        "(and docs/http.md) when JSON Schema cannot state it."
    )
